#ifndef MRC_EQUEUE_H
#define MRC_EQUEUE_H
#include <stddef.h>
#include <stdint.h>
/* One mrc-switch egress port's paced two-class queue, in C (mrcswitch/queue.py's
 * EgressQueue is the Python twin and the reference: same verdicts, same frames out in the
 * same order, same counters, same token arithmetic in double). C never allocates: the caller
 * owns the struct and one memory block of mrc_eq_mem_bytes() bytes that holds both classes.
 *
 * Classes, served in strict priority, each a FIFO of whole frames kept in a byte ring:
 * - high: DSCP CONTROL (46), TRIMMED (12), TRIMMED_LASTHOP (16), bounded by high_buffer_bytes;
 * - data: everything else, bounded by buffer_bytes.
 * Bounds count frame lengths exactly as the twin does (the storage is sized so that the
 * bound, never the storage, decides admission).
 * enqueue of a data frame: ECN (ecn_on, data_bytes > ecn_threshold_bytes, ECT(0)/ECT(1):
 * set CE, MARKED); overflow: mrcnic/wire/trim.py's rule (the one trim rule): a trimmable
 * frame (DSCP 4 or 8, trim_on, a complete MRC data packet) is cut to max(trim_bytes, its MRC
 * headers), DSCP set to TRIMMED (TRIMMED_LASTHOP if last_hop), IPv6 payload length, UDP length and UDP checksum
 * fixed (over the final destination: the current one shifted until end of carrier, see
 * usid.final_destination with lblen) and queued high (TRIMMED, or DROPPED if high is full);
 * anything else DROPPED. Verdict numbers are queue.Verdict's.
 *
 * Lossless class (priority flow control; lossless_buffer_bytes > 0): frames of DSCP
 * lossless_dscp wait in a third ring, tagged with the port they came in on, and are never
 * trimmed. Each in-port's lossless bytes queued in ANY queue of the switch are summed in
 * in_bytes[in_port] (one array shared by the switch's queues, read by the switch's PFC
 * logic to pause that in-port's upstream): a frame that would take its in-port above
 * in_limit_bytes (XOFF + headroom), or the ring above lossless_buffer_bytes, is DROPPED and
 * counted in lossless_drops (correct headroom keeps it 0). ECN: with lossless_ecn, an ECT
 * frame is marked CE above ecn_threshold_bytes of lossless bytes queued here (DCQCN's marks,
 * on every hop). Service: high, then lossless unless paused (now < paused_until_ns, set by
 * the caller from the PAUSE frames the port receives), then data: strict priority, as a NIC
 * serves its lossless queue. While paused, fast_budget is -1 (a lossless frame must not
 * leave at once).
 *
 * Link propagation delay (the wire; mrc_eq_set_delay, delay_ns > 0): a frame the token
 * bucket lets leave at now does not go out at once but onto the wire, a FIFO of frames
 * each released at now + delay_ns (never before the frame ahead of it: a link does not
 * reorder), and leaves the port when released. The wire is bounded by wire_bound_bytes of
 * frames (what the bucket can put on it within one delay, plus a frame); a frame that does
 * not fit waits in its class (counted in wire_stalls; it takes a late caller to happen).
 * Nothing leaves at once while the wire is in use (fast_budget -1). Frames on the wire are
 * not queued (depth, ECN and PFC count the classes only); a flush drops them too (the
 * link went down with them in flight). The twin does the same with the same numbers. */

enum {
    MRC_EQ_QUEUED = 0,
    MRC_EQ_MARKED = 1,
    MRC_EQ_TRIMMED = 2,
    MRC_EQ_DROPPED = 3,
    MRC_EQ_HIGH = 4,
    MRC_EQ_SEND_BATCH = 64, /* frames per sendmmsg in mrc_eq_send */
    MRC_EQ_MAX_DELAY_NS = 1000000000 /* longest one-way delay mrc_eq_set_delay takes (1 s) */
};

struct mrc_equeue {
    /* configuration: the caller sets these, then calls mrc_eq_init */
    double rate_per_ns;          /* token bucket rate, bytes per ns, > 0 */
    double burst_bytes;          /* token bucket depth, >= 0 */
    int64_t buffer_bytes;        /* data class bound, > 0 */
    int64_t high_buffer_bytes;   /* high class bound, > 0 */
    int64_t ecn_threshold_bytes; /* data bytes queued above which ECT frames get CE */
    int64_t max_frame_bytes;     /* longest frame enqueue accepts (longer: DROPPED) */
    int32_t ecn_on;
    int32_t trim_on;
    int32_t last_hop;
    int32_t trim_bytes; /* 0 = exactly the MRC headers */
    int32_t lblen;      /* locator block length in bits: 16..112, a multiple of 16 */
    int64_t lossless_buffer_bytes; /* lossless class bound; 0: none (its DSCP is data) */
    int64_t in_limit_bytes;        /* per in-port lossless bound (XOFF + headroom) */
    int64_t *in_bytes;             /* n_in counters shared by a switch's queues (or NULL) */
    uint32_t n_in;
    int32_t lossless_dscp;         /* the lossless class's DSCP */
    int32_t lossless_ecn;          /* mark ECT lossless frames CE above ecn_threshold_bytes */
    int32_t spare;
    int64_t paused_until_ns;       /* the caller's: lossless not served before this */
    /* state: read-only for the caller */
    double tokens;
    int64_t last_ns;
    int64_t high_bytes;      /* sum of queued high frames' lengths */
    int64_t data_bytes;      /* sum of queued data frames' lengths */
    int64_t max_depth_bytes; /* max of high_bytes + data_bytes after an enqueue */
    int64_t ecn_marks;
    int64_t trims;
    int64_t high_frames;
    int64_t data_frames;
    int64_t lossless_bytes;
    int64_t lossless_frames;
    int64_t lossless_drops;
    /* storage (private): three byte rings inside the caller's block */
    uint8_t *mem;
    uint64_t high_size, high_head, high_tail, high_used;
    uint64_t data_size, data_head, data_tail, data_used;
    uint64_t ll_size, ll_head, ll_tail, ll_used;
    /* the wire (mrc_eq_set_delay; mrc_eq_init empties it and sets delay_ns = 0) */
    int64_t delay_ns;         /* one-way delay of the link: read-only, set by mrc_eq_set_delay */
    int64_t wire_bound_bytes; /* frame bytes the wire may hold */
    int64_t wire_bytes;       /* frame bytes on the wire */
    int64_t wire_frames;
    int64_t wire_stalls;      /* times the bound kept a frame in its class */
    int64_t last_release_ns;  /* release time of the wire's newest frame */
    uint8_t *wire_mem;
    uint64_t wire_size, wire_head, wire_tail, wire_used;
};

/* Bytes of memory the queue needs for these bounds (0 if a bound is <= 0 or absurd). */
size_t mrc_eq_mem_bytes(int64_t buffer_bytes, int64_t high_buffer_bytes, int64_t max_frame_bytes);

/* Bytes the lossless ring adds to that (0 if lossless_buffer_bytes is 0; 0 too if it is
 * negative or absurd, which mrc_eq_init then refuses). */
size_t mrc_eq_lossless_mem_bytes(int64_t lossless_buffer_bytes, int64_t max_frame_bytes);

/* Check the configuration, lay the rings out in mem (mem_len >= mrc_eq_mem_bytes(...) +
 * mrc_eq_lossless_mem_bytes(...)),
 * empty both classes, zero the counters, tokens = burst_bytes, last_ns = now_ns.
 * Returns 0, or -EINVAL (bad configuration or mem too short: nothing changed). */
int mrc_eq_init(struct mrc_equeue *q, uint8_t *mem, size_t mem_len, int64_t now_ns);

/* Admit one forwarded frame (Ethernet + IPv6, already rewritten): copies it in (the
 * caller's buffer may be reused at once). Returns a verdict (MRC_EQ_*), -EINVAL if q is not
 * initialised. A frame shorter than 16 bytes or longer than max_frame_bytes is DROPPED. */
int mrc_eq_enqueue(struct mrc_equeue *q, const uint8_t *frame, size_t len);

/* mrc_eq_enqueue of a frame that came in on in_port (< n_in: its lossless bytes are
 * accounted in in_bytes[in_port]; anything else: not accounted to any port). */
int mrc_eq_enqueue_in(struct mrc_equeue *q, const uint8_t *frame, size_t len, int32_t in_port);

/* Frames the link may carry by now_ns, high first, within the token bucket (refilled as
 * the twin's _refill), at most max: each is copied to out (back to back) and its length
 * written to lens[k]; stops early, leaving the frame queued, if the next one does not fit
 * out_len. Returns how many frames, or -EINVAL. */
int mrc_eq_dequeue(struct mrc_equeue *q, int64_t now_ns, size_t max, uint8_t *out,
                   size_t out_len, uint32_t *lens);

/* What the twin's dequeue(now_ns, MRC_EQ_SEND_BATCH) + sendmmsg does, repeated while a
 * batch is full: the frames go out on fd straight from the rings (fd < 0: they all fail
 * with EBADF). A frame the kernel refuses is gone all the same (the caller counts it).
 * out[0] = sent, out[1] = failed, out[2] = errno of the last failure (0 if none),
 * out[3] = bytes sent. Stops after a batch with a failure. Returns frames dequeued, or
 * -EINVAL. */
int mrc_eq_send(struct mrc_equeue *q, int fd, int64_t now_ns, int64_t *out);

/* When the head frame may leave (now_ns if already), or -1 if every class is empty; with
 * only paused lossless frames queued, when the pause ends (paused_until_ns). */
int64_t mrc_eq_next_send_ns(struct mrc_equeue *q, int64_t now_ns);

/* The twin's fast_budget: -1 if anything is queued, else the tokens now (truncated). */
int64_t mrc_eq_fast_budget(struct mrc_equeue *q, int64_t now_ns);

/* The twin's consume: tokens -= nbytes (frames that left without queueing). */
void mrc_eq_consume(struct mrc_equeue *q, int64_t nbytes);

/* Drop everything queued and on the wire; returns how many frames. */
int64_t mrc_eq_flush(struct mrc_equeue *q);

/* The wire bound a delay of delay_ns gives q: 0 for 0; for more, what the bucket can put on
 * the wire within the delay plus the longest frame, (int64)(burst_bytes + rate_per_ns *
 * delay_ns) + max_frame_bytes, and never less than the frames on the wire now; -1 if
 * delay_ns is out of range or the bound is absurd. */
int64_t mrc_eq_wire_bound(const struct mrc_equeue *q, int64_t delay_ns);

/* Bytes of memory mrc_eq_set_delay needs for delay_ns (0 for a delay of 0: the wire keeps
 * its block until it drains), or 0 if out of range. */
size_t mrc_eq_wire_mem_bytes(const struct mrc_equeue *q, int64_t delay_ns);

/* Set the link's one-way delay (0..MRC_EQ_MAX_DELAY_NS). For delay_ns > 0, mem (mem_len >=
 * mrc_eq_wire_mem_bytes(q, delay_ns), owned by the caller) becomes the wire and the frames
 * on the old one move to it in order (the caller may free the old block after the call);
 * for 0, mem is not used: frames still on the wire leave as they were due and new frames
 * leave at once once it is empty. Frames already on the wire keep their release times.
 * Returns 0, or -EINVAL (nothing changed). */
int mrc_eq_set_delay(struct mrc_equeue *q, int64_t delay_ns, uint8_t *mem, size_t mem_len);
#endif
