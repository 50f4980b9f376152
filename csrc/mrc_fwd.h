#ifndef MRC_FWD_H
#define MRC_FWD_H
#include <stddef.h>
#include <stdint.h>
/* Per-batch mechanics of mrc-switch's forwarding (mrcswitch/fastpath.py is the Python twin).
 * The DECISIONS are Python's (mrcswitch.pipeline); C only copies header keys out of a batch
 * and applies decision records to the frames in place. No system calls, no allocation.
 *
 * The caller owns two structs and every array they point at, and builds them once (per
 * receive ring, per switch), not per batch:
 * - struct mrc_fwd_rx: where a batch's frames are (frame i starts at buf + offs[i] and is
 *   lens[i] bytes long as received; a frame longer than cap bytes was cut by the receive
 *   path); for mrc_fwd_wake (mrc_fcache.h) also the PACKET_MMAP ring geometry and the
 *   in-port's decision cache;
 * - struct mrc_fwd_batch: per-frame scratch, the out-ports (headers, budgets, sockets, token
 *   buckets), the drop histogram, and in res what the last call did.
 *
 * Decision record (int32, one per frame): >= 0 forward, port = d & 0xFFFF, shifts = d >> 16
 * (uSIDs to consume: the destination's bytes after the locator block move left by 2*shifts
 * bytes, zero-filled); < 0 drop, reason = -d (a small positive number). */

enum {
    MRC_FWD_HDR_LEN = 54,      /* Ethernet + IPv6 header: what a decision depends on */
    MRC_FWD_SEND = 0,          /* verdicts: sent now (listed in order[]) */
    MRC_FWD_QUEUE = 1,         /* forwarded, rewritten, but the port cannot take it now */
    MRC_FWD_DROP = 2,          /* counted in hist[reason] */
    MRC_FWD_REFUSED = 3,       /* the record does not fit the frame: Python decides again */
    MRC_FWD_OFF_PLEN = 18,     /* frame offsets: IPv6 payload length (big-endian 16 bits) */
    MRC_FWD_OFF_HOP = 21,      /* IPv6 hop limit */
    MRC_FWD_OFF_DST = 38,      /* IPv6 destination address */
    MRC_FWD_L2_LEN = 12,       /* bytes of l2 per port: Ethernet dst + src */
    MRC_FWD_MAX_BATCH = 65535, /* frame indices are uint16_t */
    MRC_FWD_SHIFT_BITS = 16,   /* record: port = d & (MRC_FWD_MAX_PORTS - 1), shifts = d >> 16 */
    MRC_FWD_MAX_PORTS = 65536
};

/* Where a batch's frames are. Fields after cap are read by mrc_fwd_wake only. */
struct mrc_fwd_rx {
    uint8_t *buf;
    size_t buf_len;
    uint32_t *offs; /* slots entries each: written by mrc_fwd_wake, read by the others */
    uint32_t *lens; /* mrc_fwd_plan cuts a forwarded frame's entry to 54 + payload length */
    size_t slots;   /* frames per batch at most (<= MRC_FWD_MAX_BATCH) */
    size_t cap;     /* receive slot: a frame longer than this was cut */
    /* a PACKET_MMAP ring at buf (geometry as mrc_ring_collect) */
    size_t block_size;
    size_t frame_size;
    size_t frame_nr;
    /* the in-port's decision cache (mrc_fcache.h) */
    const uint8_t *table;
    size_t table_len;
};

/* What mrc_fwd_wake's send on one out-port did. */
struct mrc_fwd_sent {
    int64_t sent;   /* frames sent */
    int64_t failed; /* frames not sent */
    int64_t err;    /* errno of the last failure (EBADF: no socket), 0 if none */
    int64_t bytes;  /* bytes sent */
};

/* What the last mrc_fwd_plan or mrc_fwd_wake did (every field written by each call). */
struct mrc_fwd_result {
    int64_t n;            /* frames in the batch (wake: collected from the ring) */
    int64_t misses;       /* wake: frames whose key is not cached; then nothing else is done */
    int64_t n_defer;      /* frames listed in defer[]: QUEUED and REFUSED, in order */
    int64_t released;     /* wake: 1 if the n slots went back to the kernel (n_defer == 0) */
    int64_t n_sent_ports; /* wake: out-ports listed in sent_ports[] */
    int64_t rx_bytes;     /* sum of lens as received */
    int64_t drops;        /* frames counted in hist */
};

struct mrc_fwd_batch {
    /* per frame: max_batch entries each */
    size_t max_batch;     /* <= MRC_FWD_MAX_BATCH; a batch has at most this many frames */
    int32_t *dec;         /* decision records (in; mrc_fwd_wake fills them from the cache) */
    uint8_t *verdict;     /* MRC_FWD_* (out) */
    uint16_t *order;      /* SENT frames grouped by port, arrival order within a port (out) */
    uint16_t *defer;      /* QUEUED and REFUSED frames in order (out) */
    /* per out-port: n_ports entries each */
    size_t n_ports;       /* 1..MRC_FWD_MAX_PORTS */
    const uint8_t *l2;    /* MRC_FWD_L2_LEN bytes per port */
    size_t l2_len;        /* >= MRC_FWD_L2_LEN * n_ports */
    size_t block_bytes;   /* locator block: 1..14 bytes of the destination */
    int64_t *budget;      /* bytes it may send at once (in/out); < 0: it queues everything */
    int64_t *port_bytes;  /* bytes of its SENT frames (out) */
    uint32_t *port_count; /* its SENT frames (out) */
    uint32_t *port_start; /* its first in order[] (out) */
    /* per out-port, read by mrc_fwd_wake only */
    int32_t *fds;              /* its send socket, -1: none */
    const double *rate_per_ns; /* its token bucket */
    const int64_t *burst;
    int64_t *stamp_ns;         /* when budget was set (in/out) */
    struct mrc_fwd_sent *sent; /* what its send did (out, for the ports in sent_ports) */
    uint32_t *sent_ports;      /* the ports mrc_fwd_wake sent on, increasing (out) */
    /* drops by reason (in/out: added to) */
    int64_t *hist;
    size_t hist_len;
    struct mrc_fwd_result res; /* out */
};

/* keys + 54*i receives frame i's first 54 bytes (zero-filled past the frame). Returns 0, or
 * -EINVAL (n > rx->slots, keys_len < 54*n, or a frame starting outside buf). */
int mrc_fwd_keys(const struct mrc_fwd_rx *rx, size_t n, uint8_t *keys, size_t keys_len);

/* Apply decision records b->dec[0..n) to the batch of n frames in rx, in frame order.
 * A record is REFUSED (frame untouched) unless the frame is whole (54 <= lens[i] <= cap,
 * inside buf) and covers its IPv6 payload length (lens[i] >= 54 + plen), and: a drop's reason
 * is in 1..hist_len-1; a forward's port is < n_ports, its shifts fit after the block and its
 * hop limit is > 1. Drops add 1 to hist[reason]. Forwards are rewritten in place (hop limit
 * decremented, destination shifted, Ethernet dst/src = l2 + 12*port), cut to 54 + plen
 * (lens[i] updated), then SENT if budget[port] still covers them (budget and port_bytes move
 * by the frame's length) or else QUEUED, and budget[port] becomes -1 so that every later
 * frame to that port queues behind it (FIFO). A budget < 0 on entry queues everything.
 * Outputs: verdict[i]; order[] = the SENT frames, port p's at order[port_start[p] .. +
 * port_count[p]); defer[] = QUEUED and REFUSED frames in order; res: n, n_defer, rx_bytes,
 * drops (misses, released, n_sent_ports = 0). port_bytes, port_count, port_start are
 * overwritten; budget and hist are in/out.
 * Returns res.n_defer, or -EINVAL for bad arguments (n > max_batch or rx->slots, ...: nothing
 * written). */
int mrc_fwd_plan(struct mrc_fwd_batch *b, const struct mrc_fwd_rx *rx, size_t n);
#endif
