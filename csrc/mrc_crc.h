#ifndef MRC_CRC_H
#define MRC_CRC_H
#include <stddef.h>
#include <stdint.h>
/* CRC-32 (IEEE 802.3, zlib's crc32 and Python's zlib.crc32: the ICRC). libdeflate's
 * carry-less-multiply version when the build found libdeflate (about 2.7x zlib's speed on a
 * 4 KiB payload on the project's machine kind), zlib's otherwise: the same values. */
uint32_t mrc_crc32(uint32_t crc, const uint8_t *buf, size_t len);

/* Whether mrc_crc32 folds 256 bytes a step with AVX-512 VPCLMULQDQ (1, when the CPU has it:
 * the default) or leaves all to the library (0). `on` 0 or 1 sets it (no such CPU: stays 0),
 * -1 only asks; returns the setting in force. Both give the same CRC: the tests run each. */
int mrc_crc32_simd(int on);

/* 1 when this build uses libdeflate, 0 for zlib. */
int mrc_crc32_libdeflate(void);
#endif
