#ifndef MRC_FWD_H
#define MRC_FWD_H
#include <stddef.h>
#include <stdint.h>
/* Per-batch mechanics of mrc-switch's forwarding (mrcswitch/fastpath.py is the Python twin).
 * The DECISIONS are Python's (mrcswitch.pipeline); C only copies header keys out of a batch
 * and applies decision records to the frames in place. No system calls, no allocation.
 *
 * A batch is n frames in a caller-owned buffer: frame i starts at buf + offs[i] and is
 * lens[i] bytes long as received; a frame longer than cap bytes was cut by the receive path.
 *
 * Decision record (int32, one per frame): >= 0 forward, port = d & 0xFFFF, shifts = d >> 16
 * (uSIDs to consume: the destination's bytes after the locator block move left by 2*shifts
 * bytes, zero-filled); < 0 drop, reason = -d (a small positive number). */

enum {
    MRC_FWD_HDR_LEN = 54,   /* Ethernet + IPv6 header: what a decision depends on */
    MRC_FWD_SEND = 0,       /* verdicts: sent now (listed in order[]) */
    MRC_FWD_QUEUE = 1,      /* forwarded, rewritten, but the port cannot take it now */
    MRC_FWD_DROP = 2,       /* counted in hist[reason] */
    MRC_FWD_REFUSED = 3     /* the record does not fit the frame: Python decides again */
};

/* keys + 54*i receives frame i's first 54 bytes (zero-filled past the frame). Returns 0, or
 * -EINVAL (keys_len < 54*n, or a frame starting outside buf). */
int mrc_fwd_keys(const uint8_t *buf, size_t buf_len, const uint32_t *offs, const uint32_t *lens,
                 size_t cap, size_t n, uint8_t *keys, size_t keys_len);

/* Apply decision records dec[0..n) to a batch, in frame order.
 * A record is REFUSED (frame untouched) unless the frame is whole (54 <= lens[i] <= cap,
 * inside buf) and covers its IPv6 payload length (lens[i] >= 54 + plen), and: a drop's reason
 * is in 1..hist_len-1; a forward's port is < n_ports, its shifts fit after the block and its
 * hop limit is > 1. Drops add 1 to hist[reason]. Forwards are rewritten in place (hop limit
 * decremented, destination shifted, Ethernet dst/src = l2 + 12*port), cut to 54 + plen
 * (lens[i] updated), then SENT if budget[port] still covers them (budget and port_bytes move
 * by the frame's length) or else QUEUED, and budget[port] becomes -1 so that every later
 * frame to that port queues behind it (FIFO). A budget < 0 on entry queues everything.
 * Outputs: verdict[i]; order[] = the SENT frames grouped by port in arrival order, port p's
 * at order[port_start[p] .. + port_count[p]); defer[] = QUEUED and REFUSED frames in order;
 * totals[0] = sum of lens as received, totals[1] = drops counted.
 * port_bytes, port_count, port_start and totals are overwritten; budget and hist are in/out.
 * Returns the number of entries in defer, or -EINVAL for bad arguments (nothing written). */
int mrc_fwd_plan(uint8_t *buf, size_t buf_len, const uint32_t *offs, uint32_t *lens, size_t cap,
                 const int32_t *dec, uint8_t *verdict, size_t n, const uint8_t *l2, size_t l2_len,
                 size_t block_bytes, int64_t *budget, int64_t *port_bytes, uint32_t *port_count,
                 uint32_t *port_start, size_t n_ports, uint16_t *order, uint16_t *defer,
                 int64_t *hist, size_t hist_len, int64_t *totals);
#endif
