/* One egress port's paced two-class queue (mrcswitch/queue.py EgressQueue is the twin; its
 * trimming is mrcnic/wire/trim.py's rule, held here by tests/unit/test_trim_parity.py).
 *
 * Storage: each class is a byte ring inside the caller's block, the high ring first, then
 * the data ring, then the lossless ring (if any). A record is an 8-byte header (uint32 frame
 * length, uint32 tag: a lossless frame's in-port) followed by the frame, padded to a multiple of 8. A record never wraps: when it does not
 * fit before the end of the ring, the tail gap gets a header with length SKIP and the
 * record goes to offset 0. head..tail (used bytes, gap included) is the queued part.
 *
 * Why a ring of variable-size records rather than max_frame_bytes slots: a port's buffer
 * bounds sum of frame lengths, so slots would need bound / 16 (minimum frame) of them, each
 * max_frame_bytes long. A ring of 2 * bound + slack always holds what the bound admits: a
 * record of a frame of n >= 16 bytes takes at most n + 15 <= 2n bytes, and at most one gap
 * (shorter than the longest record) is queued at a time. */
#include "mrc_equeue.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "mrc_io.h"
#include "mrc_trim.h"
#include "mrc_wire.h"

#define REC_HDR 8u
#define SKIP 0xFFFFFFFFu
#define MIN_FRAME 16
#define MAX_BOUND (1LL << 29) /* keeps every offset in the block within uint32 */
#define MAX_FRAME (1LL << 20)

/* the wire facts: mrc_wire.h (held to mrcnic/wire/layout.py by tests/unit/test_wire_facts.py) */
#define OFF_TC_HI MRC_WIRE_OFF_TC_HI
#define OFF_TC_LO MRC_WIRE_OFF_TC_LO

/* one class's ring, a view of the struct's private fields */
struct ring {
    uint8_t *base;
    uint64_t *size, *head, *tail, *used;
};

static uint64_t pad8(uint64_t n) { return (n + 7u) & ~(uint64_t)7u; }

static uint64_t ring_bytes(int64_t bound, int64_t max_frame) {
    return pad8((uint64_t)(2 * bound + 2 * (max_frame + 16) + 64));
}

size_t mrc_eq_lossless_mem_bytes(int64_t lossless_buffer_bytes, int64_t max_frame_bytes) {
    if (lossless_buffer_bytes <= 0 || lossless_buffer_bytes > MAX_BOUND || max_frame_bytes <= 0 ||
        max_frame_bytes > MAX_FRAME) {
        return 0;
    }
    return (size_t)ring_bytes(lossless_buffer_bytes, max_frame_bytes);
}

size_t mrc_eq_mem_bytes(int64_t buffer_bytes, int64_t high_buffer_bytes, int64_t max_frame_bytes) {
    if (buffer_bytes <= 0 || high_buffer_bytes <= 0 || max_frame_bytes <= 0 ||
        buffer_bytes > MAX_BOUND || high_buffer_bytes > MAX_BOUND || max_frame_bytes > MAX_FRAME) {
        return 0;
    }
    return (size_t)(ring_bytes(high_buffer_bytes, max_frame_bytes) +
                    ring_bytes(buffer_bytes, max_frame_bytes));
}

static int initialised(const struct mrc_equeue *q) {
    return q != NULL && q->mem != NULL && q->high_size > 0 && q->data_size > 0;
}

static struct ring high_ring(struct mrc_equeue *q) {
    return (struct ring){q->mem, &q->high_size, &q->high_head, &q->high_tail, &q->high_used};
}

static struct ring data_ring(struct mrc_equeue *q) {
    return (struct ring){q->mem + q->high_size, &q->data_size, &q->data_head, &q->data_tail,
                         &q->data_used};
}

static struct ring ll_ring(struct mrc_equeue *q) {
    return (struct ring){q->mem + q->high_size + q->data_size, &q->ll_size, &q->ll_head,
                         &q->ll_tail, &q->ll_used};
}

static int64_t queued_frames(const struct mrc_equeue *q) {
    return q->high_frames + q->data_frames + q->lossless_frames;
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Room for a frame of len bytes at the tail (skipping the gap to the end if need be):
 * where its bytes go, or NULL if the ring is full (never, within the byte bound). The
 * record is committed by ring_commit. */
static uint8_t *ring_reserve(struct ring r, uint32_t len) {
    uint64_t rec = REC_HDR + pad8(len);
    uint64_t size = *r.size, tail = *r.tail, free_bytes = size - *r.used;
    if (*r.used == 0) {
        *r.head = *r.tail = tail = 0; /* empty: start over, no gap */
    }
    uint64_t before_end = size - tail;
    if (rec <= before_end && rec <= free_bytes) {
        return r.base + tail + REC_HDR;
    }
    if (rec > before_end && before_end + rec <= free_bytes) {
        wr32(r.base + tail, SKIP); /* before_end >= 8: offsets and size are multiples of 8 */
        *r.used += before_end;
        *r.tail = 0;
        return r.base + REC_HDR;
    }
    return NULL;
}

static void ring_commit(struct ring r, uint32_t len, uint32_t tag) {
    uint64_t rec = REC_HDR + pad8(len);
    wr32(r.base + *r.tail, len);
    wr32(r.base + *r.tail + 4, tag);
    *r.tail += rec;
    if (*r.tail == *r.size) {
        *r.tail = 0;
    }
    *r.used += rec;
}

/* The oldest record's offset in base (past a gap), or -1 if the ring is empty. */
static int64_t ring_peek(struct ring r) {
    if (*r.used == 0) {
        return -1;
    }
    if (rd32(r.base + *r.head) == SKIP) {
        *r.used -= *r.size - *r.head;
        *r.head = 0;
    }
    return (int64_t)*r.head;
}

static void ring_pop(struct ring r, uint32_t len) {
    uint64_t rec = REC_HDR + pad8(len);
    *r.head += rec;
    if (*r.head == *r.size) {
        *r.head = 0;
    }
    *r.used -= rec;
    if (*r.used == 0) {
        *r.head = *r.tail = 0;
    }
}

int mrc_eq_init(struct mrc_equeue *q, uint8_t *mem, size_t mem_len, int64_t now_ns) {
    if (q == NULL || mem == NULL) {
        return -EINVAL;
    }
    size_t need = mrc_eq_mem_bytes(q->buffer_bytes, q->high_buffer_bytes, q->max_frame_bytes);
    size_t ll_need = mrc_eq_lossless_mem_bytes(q->lossless_buffer_bytes, q->max_frame_bytes);
    if (q->lossless_buffer_bytes != 0 &&
        (ll_need == 0 || q->in_limit_bytes <= 0 || q->lossless_dscp < 0 ||
         q->lossless_dscp > 63 || (q->n_in > 0 && q->in_bytes == NULL))) {
        return -EINVAL;
    }
    if (need == 0 || mem_len < need + ll_need || !(q->rate_per_ns > 0) || !isfinite(q->rate_per_ns) ||
        !(q->burst_bytes >= 0) || !isfinite(q->burst_bytes) || q->lblen < 16 ||
        q->lblen > 112 || q->lblen % 16 != 0) {
        return -EINVAL;
    }
    q->tokens = q->burst_bytes;
    q->last_ns = now_ns;
    q->high_bytes = q->data_bytes = q->max_depth_bytes = 0;
    q->ecn_marks = q->trims = q->high_frames = q->data_frames = 0;
    q->lossless_bytes = q->lossless_frames = q->lossless_drops = 0;
    q->paused_until_ns = 0;
    q->mem = mem;
    q->high_size = ring_bytes(q->high_buffer_bytes, q->max_frame_bytes);
    q->data_size = ring_bytes(q->buffer_bytes, q->max_frame_bytes);
    q->ll_size = ll_need; /* 0: no lossless class */
    q->high_head = q->high_tail = q->high_used = 0;
    q->data_head = q->data_tail = q->data_used = 0;
    q->ll_head = q->ll_tail = q->ll_used = 0;
    q->delay_ns = q->wire_bound_bytes = q->wire_bytes = q->wire_frames = 0;
    q->wire_stalls = q->last_release_ns = 0;
    q->wire_mem = NULL;
    q->wire_size = q->wire_head = q->wire_tail = q->wire_used = 0;
    return 0;
}

static void note_depth(struct mrc_equeue *q) {
    int64_t d = q->high_bytes + q->data_bytes + q->lossless_bytes;
    if (d > q->max_depth_bytes) {
        q->max_depth_bytes = d;
    }
}

static int enqueue_high(struct mrc_equeue *q, const uint8_t *frame, size_t len) {
    if (q->high_bytes + (int64_t)len > q->high_buffer_bytes) {
        return 0;
    }
    struct ring r = high_ring(q);
    uint8_t *at = ring_reserve(r, (uint32_t)len);
    if (at == NULL) {
        return 0; /* cannot happen within the bound (see the top of this file) */
    }
    memcpy(at, frame, len);
    ring_commit(r, (uint32_t)len, 0);
    q->high_bytes += (int64_t)len;
    q->high_frames++;
    note_depth(q);
    return 1;
}

/* trim.TrimRule.overflow (the one cut: mrc_trim.c) straight into the high ring. */
static int enqueue_trimmed(struct mrc_equeue *q, const uint8_t *frame, size_t len) {
    size_t end = mrc_trim_header_end(frame, len);
    if (end == 0) {
        return MRC_EQ_DROPPED;
    }
    size_t keep = end;
    if (q->trim_bytes > 0 && (size_t)q->trim_bytes > keep) {
        keep = (size_t)q->trim_bytes;
    }
    if (keep > len) {
        keep = len;
    }
    if (q->high_bytes + (int64_t)keep > q->high_buffer_bytes) {
        return MRC_EQ_DROPPED;
    }
    struct ring r = high_ring(q);
    uint8_t *t = ring_reserve(r, (uint32_t)keep);
    if (t == NULL) {
        return MRC_EQ_DROPPED;
    }
    mrc_trim_cut(frame, len, t, q->trim_bytes, q->last_hop, q->lblen);
    ring_commit(r, (uint32_t)keep, 0);
    q->high_bytes += (int64_t)keep;
    q->high_frames++;
    note_depth(q);
    q->trims++;
    return MRC_EQ_TRIMMED;
}

/* A lossless frame from in_port: bounded per in-port and by the ring, never trimmed. */
static int enqueue_lossless(struct mrc_equeue *q, const uint8_t *frame, size_t len, int tc,
                            int32_t in_port) {
    int64_t *in = (in_port >= 0 && (uint32_t)in_port < q->n_in) ? &q->in_bytes[in_port] : NULL;
    if ((in != NULL && *in + (int64_t)len > q->in_limit_bytes) ||
        q->lossless_bytes + (int64_t)len > q->lossless_buffer_bytes) {
        q->lossless_drops++;
        return MRC_EQ_DROPPED;
    }
    struct ring r = ll_ring(q);
    uint8_t *at = ring_reserve(r, (uint32_t)len);
    if (at == NULL) {
        q->lossless_drops++;
        return MRC_EQ_DROPPED; /* cannot happen within the bound */
    }
    memcpy(at, frame, len);
    int verdict = MRC_EQ_QUEUED;
    int ecn = tc & 3;
    if (q->lossless_ecn && q->lossless_bytes > q->ecn_threshold_bytes &&
        (ecn == MRC_WIRE_ECN_ECT1 || ecn == MRC_WIRE_ECN_ECT0)) {
        at[OFF_TC_LO] |= MRC_WIRE_TC_LO_ECN_MASK; /* ECN = CE */
        q->ecn_marks++;
        verdict = MRC_EQ_MARKED;
    }
    ring_commit(r, (uint32_t)len, in != NULL ? (uint32_t)in_port : SKIP);
    q->lossless_bytes += (int64_t)len;
    q->lossless_frames++;
    if (in != NULL) {
        *in += (int64_t)len;
    }
    note_depth(q);
    return verdict;
}

int mrc_eq_enqueue(struct mrc_equeue *q, const uint8_t *frame, size_t len) {
    return mrc_eq_enqueue_in(q, frame, len, -1);
}

int mrc_eq_enqueue_in(struct mrc_equeue *q, const uint8_t *frame, size_t len, int32_t in_port) {
    if (!initialised(q)) {
        return -EINVAL;
    }
    if (frame == NULL || len < MIN_FRAME || len > (uint64_t)q->max_frame_bytes) {
        return MRC_EQ_DROPPED;
    }
    int tc = (frame[OFF_TC_HI] & MRC_WIRE_TC_HI_DSCP_MASK) << 4 | frame[OFF_TC_LO] >> 4;
    int dscp = tc >> 2;
    if (dscp == MRC_WIRE_DSCP_CONTROL || dscp == MRC_WIRE_DSCP_TRIMMED ||
        dscp == MRC_WIRE_DSCP_TRIMMED_LASTHOP) {
        return enqueue_high(q, frame, len) ? MRC_EQ_HIGH : MRC_EQ_DROPPED;
    }
    if (q->ll_size > 0 && dscp == q->lossless_dscp) {
        return enqueue_lossless(q, frame, len, tc, in_port);
    }
    if (q->data_bytes + (int64_t)len <= q->buffer_bytes) {
        struct ring r = data_ring(q);
        uint8_t *at = ring_reserve(r, (uint32_t)len);
        if (at == NULL) {
            return MRC_EQ_DROPPED; /* cannot happen within the bound */
        }
        memcpy(at, frame, len);
        int verdict = MRC_EQ_QUEUED;
        int ecn = tc & 3;
        if (q->ecn_on && q->data_bytes > q->ecn_threshold_bytes &&
            (ecn == MRC_WIRE_ECN_ECT1 || ecn == MRC_WIRE_ECN_ECT0)) {
            at[OFF_TC_LO] |= MRC_WIRE_TC_LO_ECN_MASK; /* ECN = CE */
            q->ecn_marks++;
            verdict = MRC_EQ_MARKED;
        }
        ring_commit(r, (uint32_t)len, 0);
        q->data_bytes += (int64_t)len;
        q->data_frames++;
        note_depth(q);
        return verdict;
    }
    if (q->trim_on && (dscp == MRC_WIRE_DSCP_TRIMMABLE || dscp == MRC_WIRE_DSCP_TRIMMABLE_RETX)) {
        return enqueue_trimmed(q, frame, len);
    }
    return MRC_EQ_DROPPED;
}

/* EgressQueue._refill */
static void refill(struct mrc_equeue *q, int64_t now_ns) {
    if (now_ns > q->last_ns) {
        double t = q->tokens + (double)(now_ns - q->last_ns) * q->rate_per_ns;
        q->tokens = t < q->burst_bytes ? t : q->burst_bytes;
        q->last_ns = now_ns;
    }
}

enum { CLS_HIGH = 0, CLS_LOSSLESS = 1, CLS_DATA = 2 };

static int paused(const struct mrc_equeue *q, int64_t now_ns) {
    return now_ns < q->paused_until_ns;
}

/* The head frame of the class served next at now_ns (high, lossless unless paused, data):
 * its offset in mem, length, class and tag, its ring in *r; 0 if none may be served. */
static int head_frame(struct mrc_equeue *q, int64_t now_ns, struct ring *r, uint64_t *off,
                      uint32_t *len, int *cls, uint32_t *tag) {
    struct ring h = high_ring(q);
    int64_t at = ring_peek(h);
    *cls = CLS_HIGH;
    if (at < 0 && q->lossless_frames > 0 && !paused(q, now_ns)) {
        h = ll_ring(q);
        at = ring_peek(h);
        *cls = CLS_LOSSLESS;
    }
    if (at < 0) {
        h = data_ring(q);
        at = ring_peek(h);
        *cls = CLS_DATA;
        if (at < 0) {
            return 0;
        }
    }
    *r = h;
    *len = rd32(h.base + at);
    *tag = rd32(h.base + at + 4);
    *off = (uint64_t)(h.base - q->mem) + (uint64_t)at + REC_HDR;
    return 1;
}

static void pop_head(struct mrc_equeue *q, struct ring r, uint32_t len, int cls, uint32_t tag) {
    ring_pop(r, len);
    if (cls == CLS_HIGH) {
        q->high_bytes -= len;
        q->high_frames--;
    } else if (cls == CLS_DATA) {
        q->data_bytes -= len;
        q->data_frames--;
    } else {
        q->lossless_bytes -= len;
        q->lossless_frames--;
        if (tag < q->n_in) {
            q->in_bytes[tag] -= len;
        }
    }
}

/* --- the wire (link propagation delay) -----------------------------------------------
 * A wire record is a ring record whose frame part is the release time (int64) followed by
 * the frame: its header length is the frame's + 8. */
#define WIRE_TS 8u

static struct ring wire_ring(struct mrc_equeue *q) {
    return (struct ring){q->wire_mem, &q->wire_size, &q->wire_head, &q->wire_tail,
                         &q->wire_used};
}

static int wire_on(const struct mrc_equeue *q) { return q->delay_ns > 0 || q->wire_frames > 0; }

static int64_t rd64(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void wr64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); }

/* The wire's oldest frame: its release time, offset in wire_mem and length; 0 if empty. */
static int wire_head(struct mrc_equeue *q, int64_t *release, uint64_t *off, uint32_t *len) {
    struct ring w = wire_ring(q);
    int64_t at = ring_peek(w);
    if (at < 0) {
        return 0;
    }
    *len = rd32(w.base + at) - WIRE_TS;
    *release = rd64(w.base + at + REC_HDR);
    *off = (uint64_t)at + REC_HDR + WIRE_TS;
    return 1;
}

/* Move the frames the tokens let leave by now_ns from the classes onto the wire (the twin's
 * _to_wire), in the order take() would pop them, while the bound has room. */
static void to_wire(struct mrc_equeue *q, int64_t now_ns) {
    refill(q, now_ns);
    double tokens = q->tokens;
    int64_t release = now_ns + q->delay_ns;
    if (release < q->last_release_ns) {
        release = q->last_release_ns; /* after a shorter delay was set: no overtaking */
    }
    struct ring w = wire_ring(q);
    for (;;) {
        struct ring r;
        uint64_t off;
        uint32_t len, tag;
        int cls;
        if (!head_frame(q, now_ns, &r, &off, &len, &cls, &tag) || (double)len > tokens) {
            break;
        }
        uint8_t *at = q->wire_bytes + (int64_t)len <= q->wire_bound_bytes
                          ? ring_reserve(w, len + WIRE_TS)
                          : NULL; /* the ring always holds the bound (mrc_eq_wire_mem_bytes) */
        if (at == NULL) {
            q->wire_stalls++;
            break;
        }
        wr64(at, release);
        memcpy(at + WIRE_TS, q->mem + off, len);
        ring_commit(w, len + WIRE_TS, 0);
        q->wire_bytes += len;
        q->wire_frames++;
        q->last_release_ns = release;
        tokens -= len;
        pop_head(q, r, len, cls, tag);
    }
    q->tokens = tokens;
}

/* Pop up to max frames released by now_ns from the wire, within room bytes together: their
 * offsets in wire_mem and lengths (valid until the next to_wire). Returns how many. */
static size_t wire_due(struct mrc_equeue *q, int64_t now_ns, size_t max, size_t room,
                       uint32_t *offs, uint32_t *lens) {
    size_t n = 0, at = 0;
    struct ring w = wire_ring(q);
    while (n < max) {
        int64_t release;
        uint64_t off;
        uint32_t len;
        if (!wire_head(q, &release, &off, &len) || release > now_ns || len > room - at) {
            break;
        }
        offs[n] = (uint32_t)off;
        lens[n] = len;
        at += len;
        n++;
        ring_pop(w, len + WIRE_TS);
        q->wire_bytes -= len;
        q->wire_frames--;
    }
    return n;
}

int64_t mrc_eq_wire_bound(const struct mrc_equeue *q, int64_t delay_ns) {
    if (q == NULL || delay_ns < 0 || delay_ns > MRC_EQ_MAX_DELAY_NS) {
        return -1;
    }
    if (delay_ns == 0) {
        return 0;
    }
    double b = q->burst_bytes + q->rate_per_ns * (double)delay_ns;
    if (!(b >= 0) || b > (double)MAX_BOUND) {
        return -1;
    }
    int64_t bound = (int64_t)b + q->max_frame_bytes;
    return bound > q->wire_bytes ? bound : q->wire_bytes;
}

size_t mrc_eq_wire_mem_bytes(const struct mrc_equeue *q, int64_t delay_ns) {
    int64_t bound = mrc_eq_wire_bound(q, delay_ns);
    if (bound <= 0) {
        return 0;
    }
    /* a record of an n-byte frame (n >= 16) takes at most n + 8 + 15 <= 2n bytes: as
     * ring_bytes, with room for the release times */
    return (size_t)ring_bytes(bound + bound / 2, q->max_frame_bytes + WIRE_TS);
}

int mrc_eq_set_delay(struct mrc_equeue *q, int64_t delay_ns, uint8_t *mem, size_t mem_len) {
    if (!initialised(q) || delay_ns < 0 || delay_ns > MRC_EQ_MAX_DELAY_NS) {
        return -EINVAL;
    }
    if (delay_ns == 0) {
        q->delay_ns = 0; /* the wire drains with its bound and block */
        return 0;
    }
    size_t need = mrc_eq_wire_mem_bytes(q, delay_ns);
    if (need == 0 || mem == NULL || mem_len < need) {
        return -EINVAL;
    }
    /* move the frames in flight to the new block, oldest first */
    uint64_t size = need, head = 0, tail = 0, used = 0;
    struct ring nw = {mem, &size, &head, &tail, &used};
    struct ring w = wire_ring(q);
    int64_t at;
    while (q->wire_mem != NULL && (at = ring_peek(w)) >= 0) {
        uint32_t rec = rd32(w.base + at);
        uint8_t *to = ring_reserve(nw, rec);
        if (to == NULL) {
            return -EINVAL; /* cannot happen: the new bound holds what is on the wire */
        }
        memcpy(to, w.base + at + REC_HDR, rec);
        ring_commit(nw, rec, 0);
        ring_pop(w, rec);
    }
    q->wire_mem = mem;
    q->wire_size = size;
    q->wire_head = head;
    q->wire_tail = tail;
    q->wire_used = used;
    q->wire_bound_bytes = mrc_eq_wire_bound(q, delay_ns);
    q->delay_ns = delay_ns;
    return 0;
}

/* Pop up to max head frames (high first) that the tokens cover and that fit in room bytes
 * together, as the twin's dequeue loop does; their offsets in mem and lengths go to offs and
 * lens. Popped frames keep their bytes until the next enqueue, so the caller copies or sends
 * them from there. Returns how many. */
static size_t take(struct mrc_equeue *q, int64_t now_ns, size_t max, size_t room,
                   uint32_t *offs, uint32_t *lens) {
    double tokens = q->tokens;
    size_t n = 0, at = 0;
    while (n < max) {
        struct ring r;
        uint64_t off;
        uint32_t len, tag;
        int cls;
        if (!head_frame(q, now_ns, &r, &off, &len, &cls, &tag) || (double)len > tokens ||
            len > room - at) {
            break;
        }
        tokens -= len;
        offs[n] = (uint32_t)off;
        lens[n] = len;
        at += len;
        n++;
        pop_head(q, r, len, cls, tag);
    }
    q->tokens = tokens;
    return n;
}

/* How a batch of frames is popped: take() from the classes, wire_due() from the wire; the
 * offsets it gives are into the block the caller names with it. */
typedef size_t (*pick_fn)(struct mrc_equeue *q, int64_t now_ns, size_t max, size_t room,
                          uint32_t *offs, uint32_t *lens);

/* Pop up to max frames with pick and copy them from base to out (within out_len, from
 * *at on), in chunks of a stack array of offsets; *at moves past them. Returns how many. */
static size_t copy_out(struct mrc_equeue *q, pick_fn pick, const uint8_t *base, int64_t now_ns,
                       size_t max, uint8_t *out, size_t out_len, size_t *at, uint32_t *lens) {
    size_t n = 0;
    while (n < max) {
        uint32_t offs[MRC_EQ_SEND_BATCH];
        size_t want = max - n < MRC_EQ_SEND_BATCH ? max - n : MRC_EQ_SEND_BATCH;
        size_t k = pick(q, now_ns, want, out_len - *at, offs, lens + n);
        for (size_t j = 0; j < k; j++) {
            memcpy(out + *at, base + offs[j], lens[n + j]);
            *at += lens[n + j];
        }
        n += k;
        if (k < want) {
            break;
        }
    }
    return n;
}

/* mrc_eq_dequeue with the wire in use (the twin's _wire_dequeue): what it released by now,
 * then what the tokens allow onto it, then (a delay of 0 while the wire drains) what of
 * that is released already. */
static int wire_dequeue(struct mrc_equeue *q, int64_t now_ns, size_t max, uint8_t *out,
                        size_t out_len, uint32_t *lens) {
    size_t at = 0;
    size_t n = copy_out(q, wire_due, q->wire_mem, now_ns, max, out, out_len, &at, lens);
    to_wire(q, now_ns);
    n += copy_out(q, wire_due, q->wire_mem, now_ns, max - n, out, out_len, &at, lens + n);
    return (int)n;
}

int mrc_eq_dequeue(struct mrc_equeue *q, int64_t now_ns, size_t max, uint8_t *out,
                   size_t out_len, uint32_t *lens) {
    if (!initialised(q) || (max > 0 && (out == NULL || lens == NULL))) {
        return -EINVAL;
    }
    if (max > INT32_MAX) {
        max = INT32_MAX;
    }
    if (wire_on(q)) {
        return wire_dequeue(q, now_ns, max, out, out_len, lens);
    }
    if (queued_frames(q) == 0) {
        return 0;
    }
    refill(q, now_ns);
    size_t at = 0;
    return (int)copy_out(q, take, q->mem, now_ns, max, out, out_len, &at, lens);
}

/* Pop frames with pick and send them on fd straight from base (base_len bytes), a batch
 * of MRC_EQ_SEND_BATCH per sendmmsg, while a batch is full and fully sent (fd < 0: every
 * frame fails with EBADF). A frame the kernel refuses is gone all the same: out[0] += sent,
 * out[1] += failed, out[2] = errno of the last failure, out[3] += bytes sent. Returns the
 * frames popped. */
static int send_out(struct mrc_equeue *q, pick_fn pick, const uint8_t *base, size_t base_len,
                    int fd, int64_t now_ns, int64_t *out) {
    uint32_t offs[MRC_EQ_SEND_BATCH], lens[MRC_EQ_SEND_BATCH];
    uint16_t idx[MRC_EQ_SEND_BATCH];
    int total = 0;
    for (;;) {
        /* a batch: the twin's dequeue(now_ns, MRC_EQ_SEND_BATCH), sent from the block */
        size_t n = pick(q, now_ns, MRC_EQ_SEND_BATCH, SIZE_MAX, offs, lens);
        if (n == 0) {
            return total;
        }
        total += (int)n;
        for (size_t j = 0; j < n; j++) {
            idx[j] = (uint16_t)j;
        }
        int64_t io[3] = {(int64_t)n, EBADF, 0};
        int sent = 0;
        if (fd >= 0) {
            sent = mrc_io_send_iov(fd, base, base_len, offs, lens, n, idx, n, io);
            if (sent < 0) { /* cannot happen: every frame lies inside the block */
                sent = 0;
                io[1] = EINVAL;
                io[2] = 0;
            }
        }
        out[0] += sent;
        out[3] += io[2];
        if ((int64_t)n > sent) { /* whatever sendmmsg did not take is gone all the same */
            out[1] += (int64_t)n - sent;
            out[2] = io[1];
            return total;
        }
        if (n < MRC_EQ_SEND_BATCH) {
            return total;
        }
    }
}

int mrc_eq_send(struct mrc_equeue *q, int fd, int64_t now_ns, int64_t *out) {
    if (!initialised(q) || out == NULL) {
        return -EINVAL;
    }
    out[0] = out[1] = out[2] = out[3] = 0;
    if (wire_on(q)) { /* as wire_dequeue, each part sent as it leaves the wire */
        size_t len = (size_t)q->wire_size;
        int n = send_out(q, wire_due, q->wire_mem, len, fd, now_ns, out);
        if (out[1] == 0) {
            to_wire(q, now_ns);
            n += send_out(q, wire_due, q->wire_mem, len, fd, now_ns, out);
        }
        return n;
    }
    if (queued_frames(q) == 0) {
        return 0;
    }
    refill(q, now_ns);
    size_t mem_len = (size_t)(q->high_size + q->data_size + q->ll_size);
    return send_out(q, take, q->mem, mem_len, fd, now_ns, out);
}

/* The time the tokens cover len bytes (now_ns if they do), as the twin's int arithmetic. */
static int64_t tokens_cover_ns(struct mrc_equeue *q, int64_t now_ns, uint32_t len) {
    refill(q, now_ns);
    double missing = (double)len - q->tokens;
    if (missing <= 0) {
        return now_ns;
    }
    double wait = missing / q->rate_per_ns;
    /* int() of the twin, saturated where int64 ends (a Python int would not) */
    if (!(wait < 9.0e18)) {
        return INT64_MAX;
    }
    int64_t w = (int64_t)wait;
    if (now_ns > 0 && w > INT64_MAX - 1 - now_ns) {
        return INT64_MAX;
    }
    return now_ns + w + 1;
}

/* mrc_eq_next_send_ns with the wire in use: the sooner of the wire's next release and the
 * time the head frame may go onto the wire (when the wire has room for it; else the next
 * release makes room). */
static int64_t wire_next_ns(struct mrc_equeue *q, int64_t now_ns) {
    int64_t next = -1, release;
    uint64_t woff;
    uint32_t wlen;
    if (wire_head(q, &release, &woff, &wlen)) {
        next = release > now_ns ? release : now_ns;
    }
    struct ring r;
    uint64_t off;
    uint32_t len, tag;
    int cls;
    int64_t t = -1;
    if (head_frame(q, now_ns, &r, &off, &len, &cls, &tag)) {
        if (q->wire_bytes + (int64_t)len <= q->wire_bound_bytes) {
            t = tokens_cover_ns(q, now_ns, len);
        }
    } else if (q->lossless_frames > 0) {
        t = q->paused_until_ns;
    }
    if (t >= 0 && (next < 0 || t < next)) {
        next = t;
    }
    return next;
}

int64_t mrc_eq_next_send_ns(struct mrc_equeue *q, int64_t now_ns) {
    if (!initialised(q)) {
        return -1;
    }
    struct ring r;
    uint64_t off;
    uint32_t len, tag;
    int cls;
    if (wire_on(q)) {
        return wire_next_ns(q, now_ns);
    }
    if (!head_frame(q, now_ns, &r, &off, &len, &cls, &tag)) {
        /* only paused lossless frames (or nothing): look again when the pause ends */
        return q->lossless_frames > 0 ? q->paused_until_ns : -1;
    }
    return tokens_cover_ns(q, now_ns, len);
}

int64_t mrc_eq_fast_budget(struct mrc_equeue *q, int64_t now_ns) {
    if (!initialised(q) || queued_frames(q) > 0 || (q->ll_size > 0 && paused(q, now_ns)) ||
        wire_on(q)) {
        return -1;
    }
    refill(q, now_ns);
    double t = q->tokens;
    if (t >= 9.2e18) {
        return INT64_MAX;
    }
    if (t <= -9.2e18) {
        return INT64_MIN;
    }
    return (int64_t)t;
}

void mrc_eq_consume(struct mrc_equeue *q, int64_t nbytes) {
    if (q != NULL) {
        q->tokens -= (double)nbytes;
    }
}

int64_t mrc_eq_flush(struct mrc_equeue *q) {
    if (!initialised(q)) {
        return 0;
    }
    int64_t n = queued_frames(q) + q->wire_frames;
    struct ring r = ll_ring(q);
    int64_t at;
    while ((at = ring_peek(r)) >= 0) { /* give the in-ports their lossless bytes back */
        uint32_t len = rd32(r.base + at), tag = rd32(r.base + at + 4);
        pop_head(q, r, len, CLS_LOSSLESS, tag);
    }
    q->high_frames = q->data_frames = q->lossless_frames = 0;
    q->high_bytes = q->data_bytes = q->lossless_bytes = 0;
    q->high_head = q->high_tail = q->high_used = 0;
    q->data_head = q->data_tail = q->data_used = 0;
    q->ll_head = q->ll_tail = q->ll_used = 0;
    q->wire_bytes = q->wire_frames = 0;
    q->wire_head = q->wire_tail = q->wire_used = 0;
    return n;
}
