#ifndef MRC_FCACHE_H
#define MRC_FCACHE_H
#include <stddef.h>
#include <stdint.h>

#include "mrc_fwd.h"
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
    MRC_FCACHE_KEY_AT = 1, /* entry bytes: the key (MRC_FWD_HDR_LEN bytes) */
    MRC_FCACHE_CODE_AT = 56 /* entry bytes: the decision record */
};

/* Store key -> code: in the key's entry if present, else the first free one in its probe
 * window, else (window full) over the key's home entry (eviction). Returns 0, or -EINVAL
 * (key_len != 54, table_len not 64 * a power of two). */
int mrc_fcache_insert(uint8_t *table, size_t table_len, const uint8_t *key, size_t key_len,
                      int32_t code);

/* 1 and *code = the record if key is stored, 0 if not, -EINVAL as mrc_fcache_insert. */
int mrc_fcache_lookup(const uint8_t *table, size_t table_len, const uint8_t *key, size_t key_len,
                      int32_t *code);

/* One wake-up of one port: rx is a PACKET_MMAP ring (buf, geometry) with the in-port's
 * decision cache (rx->table), b as for mrc_fwd_plan (mrc_fwd.h) plus the out-ports' send
 * sockets and token buckets:
 * 1. collect up to rx->slots frames from ring slot head into rx->offs/lens (as
 *    mrc_ring_collect);
 * 2. look each frame's key up in the table; if any frame misses: res.misses = how many, and
 *    stop (frames untouched, nothing sent or released: the caller decides in Python, stores
 *    the decisions and runs the batch itself);
 * 3. else every port p whose budget[p] >= 0 is refilled as its token bucket is:
 *    budget[p] = min(burst[p], budget[p] + (now_ns - stamp_ns[p]) * rate_per_ns[p]) (in
 *    double, truncated), stamp_ns[p] = now_ns (only if now_ns > stamp_ns[p]); so a budget
 *    set to the bucket's tokens at stamp_ns stays at most the tokens (the caller keeps
 *    both in step: what is sent at once leaves both); then dec[i] = the stored records and
 *    mrc_fwd_plan runs on the batch (same results);
 * 4. for every port p with SENT frames: mrc_io_send_iov(fds[p], its frames), sent[p] says
 *    what it did (an fd < 0 fails them all with EBADF); sent_ports[0..res.n_sent_ports)
 *    lists those ports in increasing order;
 * 5. if no frame was deferred (res.n_defer = 0) the n slots go back to the kernel
 *    (res.released = 1); otherwise the caller releases them once it has copied the deferred
 *    ones.
 * b->res says what happened (res.n = n; fields a step did not reach are 0).
 * Returns n (0 when the ring is empty), or -EINVAL (bad arguments: nothing done). */
int mrc_fwd_wake(struct mrc_fwd_batch *b, const struct mrc_fwd_rx *rx, size_t head,
                 int64_t now_ns);
#endif
