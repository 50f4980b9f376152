#ifndef MRC_CHECKSUM_H
#define MRC_CHECKSUM_H
#include <stddef.h>
#include <stdint.h>

/* RFC 1071 Internet checksum. The partial sum is returned folded to 16 bits (not
 * complemented): 0 only if `sum` is 0 and every byte is 0, else in 1..0xFFFF. It can be
 * fed back as `sum` for the next chunk (chunks after the first must start at an even offset
 * of the whole message). */
uint32_t mrc_csum_partial(const uint8_t *data, size_t len, uint32_t sum);

/* Whether mrc_csum_partial sums 32 bytes a step with AVX2 (1, when the CPU has it: the
 * default) or with 64-bit words (0). `on` 0 or 1 sets it (no AVX2: stays 0), -1 only asks;
 * returns the setting in force. Both give the same sum: the tests run each. */
int mrc_csum_simd(int on);

/* Fold a 32-bit accumulator to 16 bits and complement it. */
uint16_t mrc_csum_fold(uint32_t sum);

enum { MRC_CSUM_ERR_ADDR = -1 };

/* UDP-over-IPv6 checksum with the pseudo-header (RFC 8200 section 8.1). `udp` is the UDP
 * header plus payload, its checksum field as the caller left it (normally zero). A result of
 * 0 is returned as 0xFFFF. Returns MRC_CSUM_ERR_ADDR if src_len or dst_len is not 16. */
int32_t mrc_udp6_checksum(const uint8_t *src, size_t src_len, const uint8_t *dst,
                          size_t dst_len, const uint8_t *udp, size_t udp_len);
#endif
