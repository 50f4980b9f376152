#ifndef MRC_TRIM_H
#define MRC_TRIM_H
#include <stddef.h>
#include <stdint.h>
/* The one trim rule in C (mrcnic/wire/trim.py is its twin; tests/unit/test_trim_parity.py
 * holds them together): the switch's C queue (mrc_equeue.c) and the simulator's C fabric
 * (mrc_simnet.c) both cut with it. */

/* trim.header_end: the offset past the MRC data headers of a complete MRC data packet over
 * UDP to port 4791, or 0 when the frame is not one (then it is not trimmable). */
size_t mrc_trim_header_end(const uint8_t *frame, size_t len);

/* trim.trim (wire.trim_frame's cut) of a frame that is a complete MRC data packet: its first
 * max(keep_bytes, headers) bytes (never more than it has) written to out (which may be frame
 * itself), DSCP TRIMMED or, with last_hop, TRIMMED_LASTHOP (ECN kept), IPv6 payload and UDP
 * lengths fixed, the UDP checksum over the final destination (lblen-bit locator block).
 * Returns the trimmed length, or 0 when the frame is not trimmable (out untouched). The
 * caller checks the DSCP (TrimRule.overflow: only TRIMMABLE and TRIMMABLE_RETX are cut). */
size_t mrc_trim_cut(const uint8_t *frame, size_t len, uint8_t *out, int32_t keep_bytes,
                    int last_hop, int lblen);

/* usid.final_destination: the 16-byte address dst shifted (lblen-bit locator block, 16-bit
 * uSIDs) until nothing follows its active uSID, into out: what the destination sees. */
void mrc_usid_final(const uint8_t *dst, int lblen, uint8_t *out);
#endif
