/* CRC-32 for the ICRC (see mrc_crc.h). */
#include "mrc_crc.h"

#ifdef MRC_HAVE_LIBDEFLATE
/* libdeflate.h's declaration: the runtime library is linked by file name, so the build needs
 * no -dev package */
uint32_t libdeflate_crc32(uint32_t crc, const void *buf, size_t len);

uint32_t mrc_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
    return libdeflate_crc32(crc, buf, len);
}

int mrc_crc32_libdeflate(void) { return 1; }
#else
#include <zlib.h>

uint32_t mrc_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
    return (uint32_t)crc32_z(crc, buf, len);
}

int mrc_crc32_libdeflate(void) { return 0; }
#endif
