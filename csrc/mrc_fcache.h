#ifndef MRC_FCACHE_H
#define MRC_FCACHE_H
#include <stddef.h>
#include <stdint.h>
/* mrc-switch's per-wake-up fast path (mrcswitch/fcache.py is the Python twin): a bounded
 * memo of Python's forwarding decisions, and one call that forwards a whole receive batch
 * with it. C still makes no decision: it only replays the ones Python stored.
 *
 * Decision cache: a caller-owned table of table_len / 64 entries (a power of two), 64 bytes
 * each: byte 0 = 1 if used, bytes 1..54 = the key (a frame's first 54 bytes, zero-filled past
 * its end, exactly the key of the pipeline's per-in-port memo), bytes 56..59 = the decision
 * record (int32, native order, as in mrc_fwd.h). One table per in-port. A key's home is
 * FNV-1a-32(key) mod entries; it lives in one of the MRC_FCACHE_PROBES entries from there
 * (wrapping). Zero-fill the table to empty it. */

enum {
    MRC_FCACHE_ENTRY = 64,
    MRC_FCACHE_PROBES = 8,
    MRC_WAKE_RES_LEN = 5 /* res[] holds at least this + n_ports entries */
};

/* Store key -> code: in the key's entry if present, else the first free one in its probe
 * window, else (window full) over the key's home entry (eviction). Returns 0, or -EINVAL
 * (key_len != 54, table_len not 64 * a power of two). */
int mrc_fcache_insert(uint8_t *table, size_t table_len, const uint8_t *key, size_t key_len,
                      int32_t code);

/* 1 and *code = the record if key is stored, 0 if not, -EINVAL as mrc_fcache_insert. */
int mrc_fcache_lookup(const uint8_t *table, size_t table_len, const uint8_t *key, size_t key_len,
                      int32_t *code);

/* One wake-up of one port with a PACKET_MMAP ring (geometry as mrc_ring_collect):
 * 1. collect up to max frames from slot head (offs/lens as mrc_ring_collect);
 * 2. look each frame's key up in table; if any frame misses: res[1] = misses and stop
 *    (frames untouched, nothing sent or released: the caller decides in Python, stores the
 *    decisions and runs the batch itself);
 * 3. else every port p whose budget[p] >= 0 is refilled as its token bucket is:
 *    budget[p] = min(burst[p], budget[p] + (now_ns - stamp_ns[p]) * rate_per_ns[p]) (in
 *    double, truncated), stamp_ns[p] = now_ns (only if now_ns > stamp_ns[p]); so a budget
 *    set to the bucket's tokens at stamp_ns stays at most the tokens (the caller keeps
 *    both in step: what is sent at once leaves both); then dec[i] = the stored records and
 *    mrc_fwd_plan runs on the batch (same arguments, same results);
 * 4. for every port p with SENT frames: mrc_io_send_iov(fds[p], its frames) with
 *    port_out[4p..4p+3] = sent, failed, errno, bytes (an fd < 0 fails them all with EBADF);
 *    res[5..5+res[4]) lists those ports in increasing order;
 * 5. if no frame was deferred (res[2] = n_defer = 0) the n slots go back to the kernel
 *    (res[3] = 1); otherwise the caller releases them once it has copied the deferred ones.
 * res[0] = n. res needs MRC_WAKE_RES_LEN + n_ports entries, port_out 4 * n_ports.
 * Returns n (0 when the ring is empty), or -EINVAL (bad arguments: nothing done). */
int mrc_fwd_wake(uint8_t *ring, size_t ring_len, size_t block_size, size_t frame_size,
                 size_t frame_nr, size_t head, size_t max, uint32_t *offs, uint32_t *lens,
                 size_t cap, const uint8_t *table, size_t table_len, int32_t *dec,
                 uint8_t *verdict, const uint8_t *l2, size_t l2_len, size_t block_bytes,
                 int64_t *budget, int64_t *port_bytes, uint32_t *port_count, uint32_t *port_start,
                 size_t n_ports, uint16_t *order, uint16_t *defer, int64_t *hist,
                 size_t hist_len, int64_t *totals, const int32_t *fds, int64_t *port_out,
                 int64_t *res, int64_t now_ns, const double *rate_per_ns,
                 const int64_t *burst, int64_t *stamp_ns);
#endif
