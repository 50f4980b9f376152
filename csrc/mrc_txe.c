/* The send engine: the requester's data path (see mrc_txe.h). Each function names the
 * Python it is the twin of; the order of steps, counters and feedback follows it exactly. */
#include "mrc_txe.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "mrc_checksum.h"
#include "mrc_crc.h"
#include "mrc_mt.h"
#include "mrc_txq.h"
#include "mrc_wire.h"

enum {
    OFF_UDP = MRC_WIRE_OFF_UDP,
    OFF_BTH = MRC_WIRE_OFF_BTH,
    OFF_SRC = MRC_WIRE_OFF_SRC,
    OFF_DST = MRC_WIRE_OFF_DST,
    MASK = 0xFFFFFF,
    HALF = 0x800000,
    HDR_DATA = OFF_BTH + 40, /* Ethernet .. RETH */
    SACK_END = OFF_BTH + 12 + 40 + 4,
    NACK_END = OFF_BTH + 12 + 20 + 4,
    OP_FIRST = MRC_WIRE_OP_WRITE_FIRST,
    OP_MIDDLE = MRC_WIRE_OP_WRITE_FIRST + 1,
    OP_LAST = MRC_WIRE_OP_WRITE_FIRST + 2,
    OP_LAST_IMM = MRC_WIRE_OP_WRITE_LAST_IMM,
    OP_ONLY = MRC_WIRE_OP_WRITE_LAST_IMM + 1,
    OP_ONLY_IMM = MRC_WIRE_OP_WRITE_ONLY_IMM,
    MSN_WINDOW = 1 << 14,
    /* TxRecord.lost_by (mrcnic.transport.sack LOST_BY_*) */
    LOST_BY_TIMEOUT = 1,
    LOST_BY_SACK = 2,
    LOST_BY_EV_ORDER = 3,
    LOST_BY_TRIM = 4,
    /* Requester's constants (requester.py) */
    REO_MULT_MAX = 16,
    REO_QUIET_RESET = 16,
    EV_ORDER_SPURIOUS_MAX = 4
};
static const double RTT_PEAK_RELEASE = 1.0 / 64;
static const double RTO_PEAK_GAIN = 1.5;
static const double RTO_PEAK_RELEASE = 1.0 / 8;
static const double STALL_MEMORY_S = 10.0;
static const double SPURIOUS_RTT_FRACTION = 0.5;

#include "mrc_bytes.inc"

/* --- random.Random's Mersenne Twister (getrandbits for k <= 32) ------------------------------ */

void mrc_txe_mt_load(struct mrc_txe_qp *q, const uint32_t *state, uint32_t index) {
    memcpy(q->mt, state, sizeof(q->mt));
    q->mti = index;
}

static uint32_t mt_next(struct mrc_txe_qp *q) { return mrc_mt_next(q->mt, &q->mti); }

static uint32_t bit_length(uint32_t n) { return n ? 32 - (uint32_t)__builtin_clz(n) : 0; }

/* EvTable._shuffle: Fisher-Yates with getrandbits rejection, as random.shuffle does it */
static void shuffle(struct mrc_txe_qp *q, int32_t *x, uint32_t len) {
    for (uint32_t i = len ? len - 1 : 0; i > 0; i--) {
        uint32_t n = i + 1;
        uint32_t k = bit_length(n);
        uint32_t j = mt_next(q) >> (32 - k);
        while (j >= n) {
            j = mt_next(q) >> (32 - k);
        }
        int32_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

static void refill(struct mrc_txe_qp *q, uint32_t g) {
    memcpy(q->bag + (size_t)g * q->nslots, q->grp + (size_t)g * q->nslots,
           q->grp_n[g] * sizeof(int32_t));
    q->bag_n[g] = q->grp_n[g];
    shuffle(q, q->bag + (size_t)g * q->nslots, q->bag_n[g]);
}

/* EvTable.pick (bag mode). Returns the slot, -1 when no EV can be sent on, -2 when a SKIP
 * release is due first (tx_count is counted; the next call finishes this pick). */
static int32_t pick(struct mrc_txe_qp *q, int32_t avoid) {
    if (!q->pick_resume) {
        q->tx_count++;
        if (q->rel_head >= 0 && q->rel_head <= q->tx_count) {
            q->pick_resume = 1;
            return -2;
        }
    }
    q->pick_resume = 0;
    uint32_t n = q->n_groups;
    uint32_t ns = q->n_sched;
    if (n == 0 || ns == 0 || ns > sizeof q->sched) {
        return -1;
    }
    uint32_t at = q->rr;
    if (at >= ns) {
        at = 0;
    }
    uint32_t i = q->sched[at];
    if (i < n && avoid >= 0 && n > 1 &&
        q->plane_of[q->grp[(size_t)i * q->nslots]] == q->plane_of[avoid]) {
        at = at + 1 < ns ? at + 1 : 0;
        i = q->sched[at];
    }
    q->rr = at + 1;
    if (i >= n) {
        return -1; /* (Python never schedules a group it has not made) */
    }
    int32_t *bag = q->bag + (size_t)i * q->nslots;
    if (q->bag_n[i] == 0) {
        refill(q, i);
    }
    int32_t slot = bag[--q->bag_n[i]];
    if (slot == avoid && q->grp_n[i] > 1) {
        if (q->bag_n[i] == 0) {
            refill(q, i);
            /* bag.remove(avoid): the first occurrence */
            for (uint32_t k = 0; k < q->bag_n[i]; k++) {
                if (bag[k] == avoid) {
                    memmove(bag + k, bag + k + 1, (q->bag_n[i] - k - 1) * sizeof(int32_t));
                    q->bag_n[i]--;
                    break;
                }
            }
        }
        slot = bag[--q->bag_n[i]];
        bag[q->bag_n[i]++] = avoid;
    }
    return slot;
}

/* --- the scoreboard (sack.py Scoreboard) ------------------------------------------------------ */

static inline struct mrc_txe_rec *rec_at(struct mrc_txe_qp *q, uint32_t psn) {
    return &q->recs[psn & (q->rec_cap - 1)];
}

/* records.get(psn) */
static inline struct mrc_txe_rec *rec_get(struct mrc_txe_qp *q, uint32_t psn) {
    struct mrc_txe_rec *r = rec_at(q, psn);
    return r->live && r->psn == psn ? r : NULL;
}

static inline int t_less(const struct mrc_txe_timer *a, const struct mrc_txe_timer *b) {
    return a->deadline_s < b->deadline_s || (a->deadline_s == b->deadline_s && a->seq < b->seq);
}

static inline int timer_live(struct mrc_txe_qp *q, const struct mrc_txe_timer *t) {
    struct mrc_txe_rec *r = rec_get(q, t->psn);
    return r != NULL && r->timer_seq == t->seq && !r->lost;
}

static void heap_up(struct mrc_txe_timer *h, uint32_t i) {
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!t_less(&h[i], &h[p])) {
            break;
        }
        struct mrc_txe_timer t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static void heap_down(struct mrc_txe_timer *h, uint32_t n, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < n && t_less(&h[l], &h[m])) {
            m = l;
        }
        if (l + 1 < n && t_less(&h[l + 1], &h[m])) {
            m = l + 1;
        }
        if (m == i) {
            return;
        }
        struct mrc_txe_timer t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_pop(struct mrc_txe_qp *q) {
    q->heap[0] = q->heap[--q->heap_n];
    heap_down(q->heap, q->heap_n, 0);
}

/* A container full of entries: keep only the live ones (dead entries are skipped when they
 * reach the head anyway, so the order of what is popped does not change). */
static void heap_compact(struct mrc_txe_qp *q) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < q->heap_n; i++) {
        if (timer_live(q, &q->heap[i])) {
            q->heap[k++] = q->heap[i];
        }
    }
    q->heap_n = k;
    for (uint32_t i = k / 2 + 1; i-- > 0;) {
        heap_down(q->heap, k, i);
    }
}

static void fifo_compact(struct mrc_txe_qp *q) {
    uint32_t k = 0, m = q->fifo_cap - 1;
    struct mrc_txe_timer *f = q->fifo;
    for (uint32_t i = 0; i < q->fifo_n; i++) {
        struct mrc_txe_timer t = f[(q->fifo_head + i) & m];
        if (timer_live(q, &t)) {
            f[(q->fifo_head + k++) & m] = t;
        }
    }
    q->fifo_n = k;
}

static void timer_push(struct mrc_txe_qp *q, double deadline, uint64_t seq, uint32_t psn,
                       int to_fifo) {
    struct mrc_txe_timer t = {deadline, seq, psn};
    if (to_fifo) {
        if (q->fifo_n == q->fifo_cap) {
            fifo_compact(q);
        }
        if (q->fifo_n < q->fifo_cap) {
            q->fifo[(q->fifo_head + q->fifo_n++) & (q->fifo_cap - 1)] = t;
            return;
        }
    }
    if (q->heap_n == q->heap_cap) {
        heap_compact(q);
    }
    if (q->heap_n < q->heap_cap) {
        q->heap[q->heap_n] = t;
        heap_up(q->heap, q->heap_n++);
    }
}

static inline const struct mrc_txe_timer *fifo_tail(struct mrc_txe_qp *q) {
    return q->fifo_n ? &q->fifo[(q->fifo_head + q->fifo_n - 1) & (q->fifo_cap - 1)] : NULL;
}

/* Scoreboard.arm */
static void arm(struct mrc_txe_qp *q, struct mrc_txe_rec *r, double deadline) {
    q->seq++;
    r->timer_seq = q->seq;
    const struct mrc_txe_timer *tail = fifo_tail(q);
    timer_push(q, deadline, q->seq, r->psn, tail == NULL || tail->deadline_s <= deadline);
}

/* The send-order list keeps the entries that can still matter: its packet's latest send */
static void ord_compact(struct mrc_txe_qp *q) {
    uint32_t k = 0, m = q->ord_cap - 1;
    for (uint32_t i = 0; i < q->ord_n; i++) {
        struct mrc_txe_ord o = q->ord[(q->ord_head + i) & m];
        struct mrc_txe_rec *r = rec_get(q, o.psn);
        if (r != NULL && r->tx_ts_ns == o.ts) {
            q->ord[(q->ord_head + k++) & m] = o;
        }
    }
    q->ord_n = k;
}

static void order_push(struct mrc_txe_qp *q, uint32_t psn, uint64_t ts) {
    if (q->ord_n == q->ord_cap) {
        ord_compact(q);
        if (q->ord_n == q->ord_cap) {
            return; /* unreachable: one live entry per outstanding PSN at most */
        }
    }
    q->ord[(q->ord_head + q->ord_n++) & (q->ord_cap - 1)] = (struct mrc_txe_ord){ts, psn};
}

static void rtxq_compact(struct mrc_txe_qp *q) {
    uint32_t k = 0, m = q->rtxq_cap - 1;
    for (uint32_t i = 0; i < q->rtxq_n; i++) {
        uint32_t psn = q->rtxq[(q->rtxq_head + i) & m];
        struct mrc_txe_rec *r = rec_get(q, psn);
        if (r != NULL && r->lost) {
            q->rtxq[(q->rtxq_head + k++) & m] = psn;
        }
    }
    q->rtxq_n = k;
}

static void rtxq_append(struct mrc_txe_qp *q, uint32_t psn) {
    if (q->rtxq_n == q->rtxq_cap) {
        rtxq_compact(q);
    }
    if (q->rtxq_n < q->rtxq_cap) {
        q->rtxq[(q->rtxq_head + q->rtxq_n++) & (q->rtxq_cap - 1)] = psn;
    }
}

static void rtxq_prepend(struct mrc_txe_qp *q, uint32_t psn) {
    if (q->rtxq_n == q->rtxq_cap) {
        rtxq_compact(q);
    }
    if (q->rtxq_n < q->rtxq_cap) {
        q->rtxq_head = (q->rtxq_head - 1) & (q->rtxq_cap - 1);
        q->rtxq[q->rtxq_head] = psn;
        q->rtxq_n++;
    }
}

static void mark_lost(struct mrc_txe_qp *q, struct mrc_txe_rec *r) {
    if (!r->lost) {
        r->lost = 1;
        r->timer_seq = 0;
        q->inflight_bytes -= r->length;
    }
}

static inline void fb(struct mrc_txe_qp *q, int32_t kind, int32_t slot, uint32_t a, uint32_t b,
                      uint64_t ts, double x) {
    if (q->n_fb < q->fb_cap) { /* callers make sure of the room first */
        q->fb[q->n_fb++] = (struct mrc_txe_fb){kind, slot, a, b, ts, x};
    }
}

/* --- frames (Requester._data_frame and _send_new's inline copy) ------------------------------- */

static uint32_t build(struct mrc_txe_qp *q, uint8_t *f, int32_t slot, uint32_t op, uint32_t psn,
                      const struct mrc_txe_msg *m, uint32_t off, uint32_t n, uint64_t ts_ns,
                      int rtx) {
    const struct mrc_txe_tmpl *t = &q->tmpl[slot];
    int imm = op == OP_LAST_IMM || op == OP_ONLY_IMM;
    uint32_t hdr = HDR_DATA + (imm ? 4 : 0);
    uint32_t ulen = n + (imm ? 56 : 52);
    memcpy(f, t->hdr, 62);
    uint32_t w0 = be32(f + 14) | (uint32_t)(rtx ? MRC_WIRE_DSCP_TRIMMABLE_RETX
                                               : MRC_WIRE_DSCP_TRIMMABLE) << 22 |
                  (uint32_t)MRC_WIRE_ECN_ECT0 << 20;
    put32(f + 14, w0);
    put16(f + 18, ulen);
    put16(f + OFF_UDP + 4, ulen);
    uint8_t *b = f + OFF_BTH;
    b[0] = (uint8_t)op;
    b[1] = 0;
    put16(b + 2, 0xFFFF);
    uint32_t flags = MRC_WIRE_BTH_FLAG_TS | (rtx ? MRC_WIRE_BTH_FLAG_RTX : 0);
    put32(b + 4, flags << 24 | q->peer_qpn);
    put32(b + 8, op < OP_LAST ? psn : (uint32_t)MRC_WIRE_BTH_ACKREQ | psn);
    put16(b + 12, m->msn);
    put16(b + 14, m->rqmsn);
    put64(b + 16, ts_ns);
    put64(b + 24, m->va + off);
    put32(b + 32, m->rkey);
    put32(b + 36, m->length);
    if (imm) {
        put32(b + 40, m->imm);
    }
    memcpy(f + hdr, m->buf + off, n);
    uint32_t icrc = mrc_crc32(0, f + OFF_BTH, hdr + n - OFF_BTH);
    put32(f + hdr + n, icrc);
    /* the UDP checksum as the Python twin writes it: 0xFFFF - (sum mod 0xFFFF), the sum of
     * the datagram as 16-bit words plus the pseudo-header (psum, ulen) */
    uint64_t sum = (uint64_t)t->psum + ulen + mrc_csum_partial(f + OFF_UDP, ulen, 0);
    put16(f + OFF_UDP + 6, 0xFFFF - (uint32_t)(sum % 0xFFFF));
    return OFF_UDP + ulen;
}

/* --- the output (mrc_txe.h) --- */

int mrc_txe_out_room(const struct mrc_txe_out *out) {
    if (out->ports == NULL) {
        return out->n < out->cap ? MRC_TXE_SENT : MRC_TXE_OUT_FULL;
    }
    for (uint32_t i = 0; i < out->n_ports; i++) {
        if (out->ports[i].n >= out->ports[i].cap) {
            return MRC_TXE_PORT_FULL;
        }
    }
    return MRC_TXE_SENT;
}

uint8_t *mrc_txe_out_frame(struct mrc_txe_out *out, uint32_t plane) {
    if (out->ports == NULL) {
        return out->buf + (size_t)out->n * out->slot_len;
    }
    struct mrc_txq *p = &out->ports[plane];
    return p->buf + (size_t)((p->head + p->n) % p->cap) * p->slot_len;
}

void mrc_txe_out_commit(struct mrc_txe_out *out, uint32_t plane, uint32_t len) {
    if (out->ports == NULL) {
        out->plane[out->n] = (uint8_t)plane;
        out->len[out->n++] = len;
        return;
    }
    struct mrc_txq *p = &out->ports[plane];
    p->len[(p->head + p->n) % p->cap] = len;
    p->n++;
    p->bytes += len;
}

static inline uint64_t ts_of(double now_s) {
    uint64_t ts = (uint64_t)(now_s * 1e9);
    return ts ? ts : 1; /* 0 means "no timestamp" in a SACK */
}

/* requester.host_stall_s: the stall memory faded to now_s */
static inline double host_stall_s(const struct mrc_txe_qp *q, double now_s) {
    if (q->host_stall_s <= 0) {
        return 0.0;
    }
    double dt = now_s - q->host_stall_at_s;
    return dt > 0 ? q->host_stall_s * exp(-dt / STALL_MEMORY_S) : q->host_stall_s;
}

/* requester.rtx_rto_s: the retransmission timer's RTO */
static inline double rtx_rto_s(const struct mrc_txe_qp *q, double now_s) {
    double stall = host_stall_s(q, now_s);
    double b = RTO_PEAK_GAIN * (q->rto_peak > stall ? q->rto_peak : stall);
    b = b < q->max_rto_s ? b : q->max_rto_s;
    return q->rto > b ? q->rto : b;
}

/* Requester._send_record with rtx=True: 1 sent, 0 no EV (the caller re-queues), -2 release */
static int send_record(struct mrc_txe_qp *q, struct mrc_txe_rec *r, double now_s,
                       struct mrc_txe_out *out) {
    int32_t slot = pick(q, r->slot);
    if (slot < 0) {
        return slot == -2 ? -2 : 0;
    }
    uint64_t ts_ns = ts_of(now_s);
    struct mrc_txe_msg *m = &q->msgs[r->msg & (q->msg_cap - 1)];
    uint32_t plane = q->plane_of[slot];
    uint8_t *f = mrc_txe_out_frame(out, plane);
    mrc_txe_out_commit(out, plane,
                       build(q, f, slot, r->opcode, r->psn, m, r->offset, r->length, ts_ns, 1));
    if (!r->ever_rtx && r->lost_by >= LOST_BY_TIMEOUT && r->lost_by <= LOST_BY_EV_ORDER) {
        uint32_t i = (uint32_t)(q->recov_count % q->recov_cap);
        q->recov_delay[i] = now_s - r->first_sent_s;
        q->recov_spur[i] = 0;
        r->recovery = (int64_t)q->recov_count++;
    }
    r->slot = slot;
    r->sent_s = now_s;
    r->tx_ts_ns = ts_ns;
    order_push(q, r->psn, ts_ns);
    q->tx_packets[slot]++;
    if (r->lost) { /* Scoreboard.resent */
        r->lost = 0;
        q->inflight_bytes += r->length;
    }
    r->ever_rtx = 1;
    q->st.retransmissions++;
    uint32_t sh = r->retries < 30 ? r->retries : 30;
    double rto = rtx_rto_s(q, now_s) * (double)(1u << sh);
    arm(q, r, now_s + (rto < q->max_rto_s ? rto : q->max_rto_s));
    return 1;
}

/* Requester.frames_to_send after the control frames: retransmissions, then _send_new */
int mrc_txe_send(struct mrc_txe_qp *q, double now_s, double cwnd_bytes,
                 struct mrc_txe_out *out) {
    if (q->dead) {
        return MRC_TXE_SENT;
    }
    if (q->cc) {
        cwnd_bytes = q->cc->cwnd_bytes; /* (the caller's is the Python algorithm's) */
    }
    uint32_t window = q->window_psns;
    if (q->rtxq_n && !q->resume_new) {
        uint32_t m = q->rtxq_cap - 1, head = q->rtxq_head, n = q->rtxq_n;
        uint32_t i = 0, kept = 0; /* [head, head + kept): deferred (beyond the peer's window) */
        int res = -1;
        while (i < n && (double)q->inflight_bytes < cwnd_bytes) {
            uint32_t psn = q->rtxq[(head + i) & m];
            struct mrc_txe_rec *r = rec_get(q, psn);
            if (r == NULL || !r->lost) {
                i++;
                continue;
            }
            if (((psn - q->snd_una) & MASK) >= window) {
                q->rtxq[(head + kept++) & m] = psn;
                i++;
                continue;
            }
            int room = mrc_txe_out_room(out);
            if (room != MRC_TXE_SENT) {
                res = room;
                break;
            }
            int s = send_record(q, r, now_s, out);
            if (s <= 0) {
                res = s == -2 ? MRC_TXE_RELEASE : MRC_TXE_NO_EV;
                break; /* the record stays at the front, after the deferred ones */
            }
            i++;
        }
        /* what is left follows the deferred entries */
        for (uint32_t k = i; k < n; k++) {
            q->rtxq[(head + kept + k - i) & m] = q->rtxq[(head + k) & m];
        }
        q->rtxq_n = kept + (n - i);
        if (res == MRC_TXE_OUT_FULL || res == MRC_TXE_RELEASE || res == MRC_TXE_PORT_FULL) {
            return res;
        }
    }
    if (q->m_seg == q->m_tail || !((double)q->inflight_bytes < cwnd_bytes)) {
        q->resume_new = 0;
        return MRC_TXE_SENT;
    }
    /* _send_new */
    uint32_t limit = window - 1;
    if (limit > q->rec_cap - 1) {
        limit = q->rec_cap - 1; /* the C engine's own bound on PSNs outstanding */
    }
    uint64_t ts_ns = ts_of(now_s);
    double deadline = now_s + rtx_rto_s(q, now_s);
    int in_order;
    if (q->resume_new) {
        in_order = q->resume_in_order;
    } else {
        const struct mrc_txe_timer *tail = fifo_tail(q);
        in_order = tail == NULL || tail->deadline_s <= deadline;
    }
    q->resume_new = 0;
    uint32_t mm = q->msg_cap - 1;
    while (q->m_seg != q->m_tail && (double)q->inflight_bytes < cwnd_bytes &&
           ((q->snd_nxt - q->snd_una) & MASK) < limit) {
        struct mrc_txe_msg *m = &q->msgs[q->m_seg & mm];
        uint32_t off = m->next_off;
        int first = off == 0;
        if (first) {
            /* len(_inflight_msgs): every message not completed and started */
            if (q->m_seg - q->m_done >= MSN_WINDOW - 1) {
                break;
            }
            if (m->has_imm) {
                if (q->wimm_outstanding >= q->max_wimm_inflight) {
                    break;
                }
                q->wimm_outstanding++;
            }
        }
        uint32_t n = m->length - off;
        if (n > q->mtu) {
            n = q->mtu;
        }
        int last = off + n >= m->length;
        uint32_t op;
        if (first && last) {
            op = m->has_imm ? OP_ONLY_IMM : OP_ONLY;
        } else if (first) {
            op = OP_FIRST;
        } else if (last) {
            op = m->has_imm ? OP_LAST_IMM : OP_LAST;
        } else {
            op = OP_MIDDLE;
        }
        int room = mrc_txe_out_room(out);
        if (room != MRC_TXE_SENT) {
            if (first && m->has_imm) {
                q->wimm_outstanding--;
            }
            if (room == MRC_TXE_OUT_FULL) {
                q->resume_new = 1; /* go on here: the retransmissions had their turn */
                q->resume_in_order = (uint8_t)in_order;
            }
            return room;
        }
        int32_t slot = pick(q, -1);
        if (slot < 0) {
            if (first && m->has_imm) { /* undo the start bookkeeping; retry later */
                q->wimm_outstanding--;
            }
            if (slot == -2) {
                q->resume_new = 1;
                q->resume_in_order = (uint8_t)in_order;
                return MRC_TXE_RELEASE;
            }
            return MRC_TXE_NO_EV;
        }
        uint32_t psn = q->snd_nxt;
        uint32_t plane = q->plane_of[slot];
        uint8_t *f = mrc_txe_out_frame(out, plane);
        mrc_txe_out_commit(out, plane, build(q, f, slot, op, psn, m, off, n, ts_ns, 0));
        struct mrc_txe_rec *r = rec_at(q, psn);
        *r = (struct mrc_txe_rec){.sent_s = now_s, .first_sent_s = now_s, .to_sent_s = -1.0,
                                  .tx_ts_ns = ts_ns, .recovery = -1, .msg = q->m_seg,
                                  .psn = psn, .offset = off, .length = n, .slot = slot,
                                  .to_slot = -1, .opcode = (uint8_t)op, .live = 1};
        q->n_live++;
        order_push(q, psn, ts_ns);
        q->seq++;
        r->timer_seq = q->seq;
        timer_push(q, deadline, q->seq, psn, in_order);
        q->tx_packets[slot]++;
        q->st.tx_data_packets++;
        q->st.tx_data_bytes += n;
        q->inflight_bytes += n;
        if (last) {
            m->next_off = m->length;
            m->last_psn = psn;
            q->m_seg++;
        } else {
            m->next_off = off + n;
        }
        q->snd_nxt = (psn + 1) & MASK;
    }
    if (limit < window - 1 && q->rec_cap < q->rec_max && q->m_seg != q->m_tail &&
        (double)q->inflight_bytes < cwnd_bytes && ((q->snd_nxt - q->snd_una) & MASK) >= limit) {
        q->resume_new = 1; /* the engine's own bound stopped it: go on here in bigger rings */
        q->resume_in_order = (uint8_t)in_order;
        return MRC_TXE_GROW;
    }
    return MRC_TXE_SENT;
}

/* --- acknowledgments ---------------------------------------------------------------------------- */

static void update_rto(struct mrc_txe_qp *q) {
    double srtt = q->has_srtt ? q->srtt : 0.0;
    double a = srtt + 4 * q->rttvar, b = RTO_PEAK_GAIN * q->rtt_peak;
    double rto = a > b ? a : b;
    if (rto < q->min_rto_s) {
        rto = q->min_rto_s;
    }
    q->rto = rto < q->max_rto_s ? rto : q->max_rto_s;
}

/* Requester._rtt_sample */
static void rtt_sample(struct mrc_txe_qp *q, double r, double now_s) {
    if (!q->has_srtt) {
        q->srtt = r;
        q->rttvar = r / 2;
        q->has_srtt = 1;
    } else {
        double d = q->srtt - r;
        q->rttvar = 0.75 * q->rttvar + 0.25 * (d < 0 ? -d : d);
        q->srtt = 0.875 * q->srtt + 0.125 * r;
    }
    if (r < q->min_rtt || !q->rtt_measured) {
        q->min_rtt = r;
        q->rtt_measured = 1;
    }
    double peak = q->rtt_peak;
    q->rtt_peak = r > peak ? r : peak + (r - peak) * RTT_PEAK_RELEASE;
    peak = q->rto_peak;
    if (r > peak) {
        q->rto_peak = r;
    } else {
        /* released per smoothed RTT of time, not per sample (see requester.py) */
        double f = (now_s - q->rto_peak_at_s) / q->srtt;
        q->rto_peak = peak + (r - peak) * RTO_PEAK_RELEASE * (f < 1.0 ? (f > 0 ? f : 0) : 1.0);
    }
    q->rto_peak_at_s = now_s;
    update_rto(q);
}

/* Requester._spurious */
static int spurious(struct mrc_txe_qp *q, struct mrc_txe_rec *r, uint32_t ev, uint64_t ts,
                    double now_s) {
    int by_original = ts == r->to_ts_ns && ev == q->ev_values[r->to_slot];
    if (!by_original && !r->lost && now_s - r->sent_s >= SPURIOUS_RTT_FRACTION * q->min_rtt) {
        return 0;
    }
    r->spurious = 1;
    if (r->recovery >= 0 && r->losses == 1 &&
        (uint64_t)r->recovery + q->recov_cap >= q->recov_count) {
        q->recov_spur[(uint64_t)r->recovery % q->recov_cap] = 1;
    }
    if (r->lost_by == LOST_BY_EV_ORDER) {
        q->st.spurious_retransmissions++;
        q->ev_order_spurious++;
        if (q->ev_order_spurious >= EV_ORDER_SPURIOUS_MAX) {
            q->ev_order_ok = 0;
        }
        return 1;
    }
    if (r->lost_by == LOST_BY_SACK) {
        q->st.spurious_retransmissions++;
        if (q->reo_mult < REO_MULT_MAX) {
            q->reo_mult++;
        }
        q->reo_quiet = 0;
        return 1;
    }
    q->st.spurious_timeouts++;
    double delay = now_s - r->to_sent_s;
    if (delay > q->rtt_peak) {
        q->rtt_peak = delay;
    }
    if (delay > q->rto_peak) {
        q->rto_peak = delay;
        q->rto_peak_at_s = now_s;
    }
    if (delay > host_stall_s(q, now_s)) { /* note_host_stall */
        q->host_stall_s = delay;
        q->host_stall_at_s = now_s;
    }
    update_rto(q);
    return 1;
}

/* records.pop(psn): the record leaves the scoreboard (its data stays readable in the ring
 * until the PSN is sent again); appended to acked[c] */
static uint32_t pop_acked(struct mrc_txe_qp *q, uint32_t psn, uint32_t *acked, uint32_t c) {
    struct mrc_txe_rec *r = rec_get(q, psn);
    if (r == NULL) {
        return c;
    }
    if (!r->lost) {
        q->inflight_bytes -= r->length;
    }
    r->live = 0;
    q->n_live--;
    acked[c] = psn;
    return c + 1;
}

/* Scoreboard.on_sack: the newly acknowledged PSNs go to acked[]; returns how many */
static uint32_t on_sack(struct mrc_txe_qp *q, uint32_t cack, uint32_t offset, uint64_t bitmap,
                        uint32_t *acked) {
    uint32_t una = q->snd_una, nxt = q->snd_nxt, c = 0;
    uint32_t span = (nxt - una) & MASK;
    if (span == 0) {
        return 0;
    }
    uint32_t n = ((cack - una) & MASK) + 1, una_floor;
    if (n <= span) {
        for (uint32_t k = 0; k < n; k++) {
            c = pop_acked(q, (una + k) & MASK, acked, c);
        }
        una_floor = (cack + 1) & MASK;
    } else {
        una_floor = una;
    }
    if (bitmap) {
        uint32_t base = (cack + 1 + offset) & MASK;
        while (bitmap) {
            uint32_t b = (uint32_t)__builtin_ctzll(bitmap);
            bitmap &= bitmap - 1;
            uint32_t psn = (base + b) & MASK;
            if (((psn - una) & MASK) < span) {
                c = pop_acked(q, psn, acked, c);
            }
        }
    }
    if (c) {
        una = una_floor;
        while (una != nxt && rec_get(q, una) == NULL) {
            una = (una + 1) & MASK;
        }
        q->snd_una = una;
        if (q->n_live == 0) {
            q->ord_n = 0;
        }
    }
    return c;
}

/* Scoreboard.lost_by_time: appended to lost[]; returns the new count */
static uint32_t lost_by_time(struct mrc_txe_qp *q, double limit_s, uint32_t *lost, uint32_t c) {
    uint32_t m = q->ord_cap - 1;
    while (q->ord_n) {
        struct mrc_txe_ord o = q->ord[q->ord_head];
        struct mrc_txe_rec *r = rec_get(q, o.psn);
        if (r == NULL || r->tx_ts_ns != o.ts || r->lost) {
            q->ord_head = (q->ord_head + 1) & m;
            q->ord_n--;
            continue;
        }
        if (r->sent_s >= limit_s) {
            break;
        }
        q->ord_head = (q->ord_head + 1) & m;
        q->ord_n--;
        lost[c++] = o.psn;
    }
    return c;
}

static double reo_window(const struct mrc_txe_qp *q) {
    double spread = q->rtt_peak - q->min_rtt;
    double w = (double)q->reo_mult * q->min_rtt * 0.25 + (spread > 0 ? spread : 0.0);
    return w < q->rto ? w : q->rto;
}

/* Requester._find_losses */
static void find_losses(struct mrc_txe_qp *q, const uint32_t *acked, uint32_t na, uint32_t cack,
                        uint32_t offset, uint64_t bitmap, double now_s) {
    double newest = q->rack_sent_s;
    for (uint32_t i = 0; i < na; i++) {
        struct mrc_txe_rec *r = rec_at(q, acked[i]);
        double t = r->sent_s;
        if (r->ever_rtx && now_s - t < q->min_rtt) {
            continue;
        }
        if (t > newest) {
            newest = t;
        }
        if (t > q->ev_acked_sent_s[r->slot]) {
            q->ev_acked_sent_s[r->slot] = t;
        }
    }
    q->rack_sent_s = newest;
    uint32_t *lost = q->work + q->rec_cap;
    uint32_t nl = newest > 0 ? lost_by_time(q, newest - reo_window(q), lost, 0) : 0;
    uint32_t n_time = nl;
    if ((bitmap & (bitmap + 1)) && q->ev_order_ok) {
        uint32_t hb = 63 - (uint32_t)__builtin_clzll(bitmap);
        uint64_t holes = ~bitmap & ((1ULL << hb) - 1);
        uint32_t base = cack + 1 + offset;
        while (holes) {
            uint32_t b = (uint32_t)__builtin_ctzll(holes);
            holes &= holes - 1;
            struct mrc_txe_rec *r = rec_get(q, (base + b) & MASK);
            if (r != NULL && !r->lost && q->ev_acked_sent_s[r->slot] > r->sent_s &&
                nl < q->rec_cap) {
                lost[nl++] = r->psn;
            }
        }
    }
    for (uint32_t i = 0; i < nl; i++) {
        struct mrc_txe_rec *r = rec_at(q, lost[i]);
        if (r->lost) {
            continue; /* found by both rules */
        }
        q->st.sack_losses++;
        r->to_sent_s = r->sent_s;
        r->to_slot = r->slot;
        r->to_ts_ns = r->tx_ts_ns;
        r->lost_by = i < n_time ? LOST_BY_SACK : LOST_BY_EV_ORDER;
        r->losses++;
        r->spurious = 0;
        mark_lost(q, r);
        rtxq_append(q, r->psn);
        fb(q, MRC_TXE_FB_EV, r->slot, MRC_TXE_IN_LOST, r->length, (uint64_t)q->inflight_bytes,
           0.0);
        q->reo_quiet++;
        if (q->reo_quiet >= REO_QUIET_RESET && q->reo_mult > 1) {
            q->reo_mult--;
            q->reo_quiet = 0;
        }
    }
}

/* EvTable.slot_of: the slot of EV value ev, or -1. Called per SACK, so first the slot the
 * EV table's own numbering puts it in (EV = (base + k) * planes + plane, slot = plane *
 * per_plane + k; checked), then a scan (explicit EV values) */
static int32_t slot_of(const struct mrc_txe_qp *q, uint32_t ev) {
    uint32_t planes = q->planes;
    if (planes && q->nslots && q->nslots % planes == 0) {
        uint32_t k = ev / planes - q->ev_values[0] / planes;
        uint32_t guess = (ev % planes) * (q->nslots / planes) + k;
        if (k < q->nslots / planes && guess < q->nslots && q->ev_values[guess] == ev) {
            return (int32_t)guess;
        }
    }
    for (uint32_t s = 0; s < q->nslots; s++) {
        if (q->ev_values[s] == ev) {
            return (int32_t)s;
        }
    }
    return -1;
}

/* Requester._complete_messages */
static void complete(struct mrc_txe_qp *q) {
    uint32_t mm = q->msg_cap - 1;
    while (q->m_done != q->m_seg) {
        struct mrc_txe_msg *m = &q->msgs[q->m_done & mm];
        uint32_t d = (q->snd_una - (uint32_t)m->last_psn) & MASK;
        if (m->last_psn < 0 || !(0 < d && d < HALF)) {
            break;
        }
        if (m->has_imm) {
            q->wimm_outstanding--;
        }
        q->st.completions++;
        fb(q, MRC_TXE_FB_COMPLETE, -1, 0, 0, q->m_done, 0.0);
        q->m_done++;
    }
}

static int room(const struct mrc_txe_qp *q, uint32_t need) {
    return q->fb_cap - q->n_fb >= need;
}

/* Requester._rx_sack */
int mrc_txe_sack(struct mrc_txe_qp *q, uint32_t cack, uint32_t offset, uint64_t bitmap,
                 uint32_t ev, uint32_t mark, int ece, uint32_t pen, uint64_t ts_ns,
                 int probe_answer, double now_s) {
    if (!room(q, ((q->snd_nxt - q->snd_una) & MASK) + 8)) {
        return -1;
    }
    if (q->dead) {
        q->st.rx_closed++;
        return 0;
    }
    q->st.rx_sacks++;
    uint32_t *acked = q->work;
    uint32_t na = on_sack(q, cack, offset, bitmap, acked);
    int64_t acked_bytes = 0;
    if (na) {
        for (uint32_t i = 0; i < na; i++) {
            struct mrc_txe_rec *r = rec_at(q, acked[i]);
            int32_t slot;
            double sent_s;
            if (r->to_sent_s >= 0 && spurious(q, r, ev, ts_ns, now_s)) {
                slot = r->to_slot; /* the timed-out original got through: credit its path */
                sent_s = r->to_sent_s;
            } else {
                slot = r->slot;
                sent_s = r->sent_s;
            }
            q->acked_packets[slot]++;
            if (sent_s > q->evidence_s[slot]) {
                q->evidence_s[slot] = sent_s;
            }
            uint32_t path = q->path_of[slot];
            if (sent_s > q->path_evidence_s[path]) {
                q->path_evidence_s[path] = sent_s;
            }
            q->path_ack_s[path] = now_s;
            acked_bytes += r->length;
        }
        find_losses(q, acked, na, cack, offset, bitmap, now_s);
    }
    double rtt = -1.0;
    if (ts_ns && !probe_answer) {
        double r = now_s - (double)ts_ns * 1e-9;
        if (r > 0) {
            rtt_sample(q, r, now_s);
            rtt = r;
        }
    }
    int32_t slot = slot_of(q, ev); /* the EV of the packet that triggered this SACK */
    if (probe_answer) {
        if (slot >= 0) {
            fb(q, MRC_TXE_FB_PROBE, slot, 0, mark != 0, ts_ns, 0.0);
        }
    } else if (mark) {
        if (slot >= 0) {
            q->ecn_echoes[slot]++;
            fb(q, MRC_TXE_FB_EV, slot,
               mark == MRC_WIRE_SACK_MARK_SKIP_ONCE ? MRC_TXE_IN_ECN_ECHO : MRC_TXE_IN_ALWAYS_SKIP,
               0, 0, 0.0);
        }
    }
    if (acked_bytes || ece) {
        if (q->cc) {
            int32_t plane = slot >= 0 ? (int32_t)q->plane_of[slot] : -1;
            mrc_nscc_on_ack(q->cc, acked_bytes, rtt >= 0, rtt, ece != 0, plane, now_s);
        } else {
            fb(q, MRC_TXE_FB_ACK, slot, (uint32_t)acked_bytes, ece != 0,
               (uint64_t)q->inflight_bytes, rtt);
        }
    }
    if (pen) {
        if (q->cc) {
            mrc_nscc_on_rcv_penalty(q->cc, pen, now_s);
        }
        fb(q, MRC_TXE_FB_PENALTY, -1, pen, 0, 0, 0.0);
    }
    if (na) {
        complete(q);
    }
    fb(q, MRC_TXE_FB_DRAIN, -1, 0, 0, 0, 0.0);
    return 0;
}

/* Requester._rx_nack */
int mrc_txe_nack(struct mrc_txe_qp *q, uint32_t reason, uint32_t psn, uint32_t cack,
                 uint64_t ts_ns, double now_s) {
    if (!room(q, 8)) {
        return -1;
    }
    if (q->dead) {
        q->st.rx_closed++;
        return 0;
    }
    q->st.rx_nacks++;
    struct mrc_txe_rec *r = rec_get(q, psn);
    if (r == NULL) {
        q->st.rx_stale_nacks++; /* about nothing outstanding: stale, or forged */
        return 0;
    }
    int fatal = reason == MRC_WIRE_NACK_UNEXP_EVENT || reason == MRC_WIRE_NACK_REMOTE_ACCESS_ERROR;
    if (fatal && r->tx_ts_ns != ts_ns && !(r->to_ts_ns != 0 && r->to_ts_ns == ts_ns)) {
        /* a fatal NACK must echo the transmission it names (or the timed-out original that
         * a retransmission replaced while the NACK was on its way): one that does not was
         * made by someone who never saw the packet (a forged frame under a spoofed address) */
        q->st.rx_unmatched_nacks++;
        return 0;
    }
    if (fatal) {
        fb(q, MRC_TXE_FB_NACK_FATAL, -1, reason, psn, r->msg, 0.0);
        q->dead = 1;
        return 0;
    }
    if (r->lost || r->tx_ts_ns != ts_ns) {
        return 0; /* about an older transmission: already being repaired */
    }
    if (reason == MRC_WIRE_NACK_TRIMMED || reason == MRC_WIRE_NACK_TRIMMED_LASTHOP) {
        int32_t slot = r->slot;
        q->trims[slot]++;
        /* EvTable.note_delivered: a trimmed header proves the path alive (not a delivery) */
        if (r->sent_s > q->evidence_s[slot]) {
            q->evidence_s[slot] = r->sent_s;
        }
        uint32_t path = q->path_of[slot];
        if (r->sent_s > q->path_evidence_s[path]) {
            q->path_evidence_s[path] = r->sent_s;
        }
        q->path_ack_s[path] = now_s;
        if (reason == MRC_WIRE_NACK_TRIMMED) {
            fb(q, MRC_TXE_FB_EV, slot, MRC_TXE_IN_TRIMMED, 0, 0, 0.0);
        }
        r->lost_by = LOST_BY_TRIM;
        r->to_sent_s = -1.0;
        mark_lost(q, r);
        rtxq_prepend(q, psn); /* repair at once, on another EV */
        if (q->cc) {
            mrc_nscc_on_trim(q->cc, reason == MRC_WIRE_NACK_TRIMMED_LASTHOP, now_s);
        }
        fb(q, MRC_TXE_FB_TRIM, slot, r->length, reason == MRC_WIRE_NACK_TRIMMED_LASTHOP,
           (uint64_t)q->inflight_bytes, 0.0);
    } else {
        if (reason == MRC_WIRE_NACK_PSN_OOR_WINDOW) {
            uint32_t span = (psn - cack) & MASK;
            if (64 <= span && span < q->window_psns) {
                q->window_psns = span;
                fb(q, MRC_TXE_FB_WINDOW, -1, span, 0, 0, 0.0);
            }
        }
        mark_lost(q, r);
        rtxq_append(q, psn);
    }
    fb(q, MRC_TXE_FB_DRAIN, -1, 0, 0, 0, 0.0);
    return 0;
}

/* QueuePair.receive_frame's checks, then Requester._rx_sack_frame */
int mrc_txe_frame(struct mrc_txe_qp *q, const uint8_t *f, uint32_t n, double now_s) {
    uint32_t op = n > OFF_BTH ? f[OFF_BTH] : 0;
    if (op != MRC_WIRE_OP_SACK && op != MRC_WIRE_OP_ACK) {
        return 0;
    }
    if (!room(q, ((q->snd_nxt - q->snd_una) & MASK) + 8)) {
        return -1;
    }
    if (q->dead) {
        q->st.rx_closed++;
        return 1;
    }
    if (n < OFF_BTH + 12) {
        q->st.rx_malformed++;
        return 1;
    }
    uint32_t w0 = be32(f + 14), plen = be16(f + 18), end = OFF_UDP + plen;
    if (be16(f + 12) != MRC_WIRE_ETHERTYPE_IPV6 || w0 >> 28 != 6 ||
        f[20] != MRC_WIRE_IPPROTO_UDP || end > n || plen < 20) {
        q->st.rx_malformed++;
        return 1;
    }
    if (!known_source(f + OFF_SRC, (const uint8_t(*)[16])q->srcs,
                      q->n_srcs < MRC_TXE_MAX_SRCS ? q->n_srcs : MRC_TXE_MAX_SRCS)) {
        q->st.rx_foreign++;
        return 1;
    }
    if (end != SACK_END) {
        return 0; /* the control path decodes it */
    }
    /* (from here on, the Python path ends by draining the EV events, whatever happened) */
    if (mrc_crc32(0, f + OFF_BTH, SACK_END - 4 - OFF_BTH) != be32(f + SACK_END - 4)) {
        q->st.rx_malformed++;
        fb(q, MRC_TXE_FB_DRAIN, -1, 0, 0, 0, 0.0);
        return 1;
    }
    const uint8_t *b = f + OFF_BTH;
    uint32_t w1 = be32(b + 4), sw0 = be32(b + 12), mark = sw0 >> 30;
    if (mark == 3 || (w1 & MASK) != q->qpn) {
        q->st.rx_malformed++;
        fb(q, MRC_TXE_FB_DRAIN, -1, 0, 0, 0, 0.0);
        return 1;
    }
    mrc_txe_sack(q, sw0 & MASK, be16(b + 16), be64(b + 20), be32(b + 28), mark,
                 (sw0 & 0x20000000) != 0, b[18] & 0x7F, be64(b + 36), op == MRC_WIRE_OP_ACK,
                 now_s);
    return 1;
}

/* --- timers ------------------------------------------------------------------------------------ */

/* Scoreboard.next_deadline */
int mrc_txe_next_deadline(struct mrc_txe_qp *q, double *deadline_s) {
    uint32_t m = q->fifo_cap - 1;
    while (q->fifo_n && !timer_live(q, &q->fifo[q->fifo_head])) {
        q->fifo_head = (q->fifo_head + 1) & m;
        q->fifo_n--;
    }
    if (q->heap_n == 0) {
        if (q->fifo_n == 0) {
            return 0;
        }
        *deadline_s = q->fifo[q->fifo_head].deadline_s;
        return 1;
    }
    while (q->heap_n && !timer_live(q, &q->heap[0])) {
        heap_pop(q);
    }
    if (q->fifo_n) {
        const struct mrc_txe_timer *f = &q->fifo[q->fifo_head];
        *deadline_s = q->heap_n && t_less(&q->heap[0], f) ? q->heap[0].deadline_s : f->deadline_s;
        return 1;
    }
    if (q->heap_n) {
        *deadline_s = q->heap[0].deadline_s;
        return 1;
    }
    return 0;
}

/* Scoreboard.expired, then the loop over them in QueuePair.handle_timer */
int mrc_txe_expire(struct mrc_txe_qp *q, double now_s) {
    if (!room(q, 2 * ((q->snd_nxt - q->snd_una) & MASK) + 8)) {
        return -1;
    }
    if (q->dead) {
        return 0;
    }
    uint32_t *exp = q->work, ne = 0, m = q->fifo_cap - 1;
    for (;;) {
        struct mrc_txe_timer t;
        const struct mrc_txe_timer *f = q->fifo_n ? &q->fifo[q->fifo_head] : NULL;
        const struct mrc_txe_timer *h = q->heap_n ? &q->heap[0] : NULL;
        if (f != NULL && f->deadline_s <= now_s && !(h != NULL && t_less(h, f))) {
            t = *f;
            q->fifo_head = (q->fifo_head + 1) & m;
            q->fifo_n--;
        } else if (h != NULL && h->deadline_s <= now_s) {
            t = *h;
            heap_pop(q);
        } else {
            break;
        }
        if (timer_live(q, &t) && ne < 2 * q->rec_cap) {
            exp[ne++] = t.psn;
        }
    }
    double quiet_s = 0.5 * q->rto;
    for (uint32_t i = 0; i < ne; i++) {
        struct mrc_txe_rec *r = rec_at(q, exp[i]);
        uint32_t sh = r->retries < 30 ? r->retries : 30;
        double rto = rtx_rto_s(q, now_s) * (double)(1u << sh);
        double deadline = r->sent_s + (rto < q->max_rto_s ? rto : q->max_rto_s);
        if (deadline > now_s) {
            arm(q, r, deadline); /* the RTO grew since it was sent */
            continue;
        }
        if (r->retries >= q->retry_limit) {
            fb(q, MRC_TXE_FB_RETRY, -1, r->psn, r->retries, r->msg, 0.0);
            q->dead = 1;
            return 0;
        }
        q->st.timeouts++;
        /* EvTable.on_timeout: ASSUMED_BAD unless its path showed life since */
        int32_t slot = r->slot;
        uint32_t path = q->path_of[slot];
        q->timeouts[slot]++;
        if (!(q->evidence_s[slot] >= r->sent_s || q->path_evidence_s[path] >= r->sent_s) &&
            !(quiet_s > 0 && now_s - q->path_ack_s[path] < quiet_s)) {
            fb(q, MRC_TXE_FB_EV, slot, MRC_TXE_IN_TIMEOUT, 0, 0, 0.0);
        }
        r->to_sent_s = r->sent_s;
        r->to_slot = r->slot;
        r->to_ts_ns = r->tx_ts_ns;
        r->lost_by = LOST_BY_TIMEOUT;
        r->losses++;
        r->retries++;
        mark_lost(q, r);
        rtxq_append(q, r->psn);
        if (q->cc) {
            mrc_nscc_on_timeout(q->cc, now_s);
        }
        fb(q, MRC_TXE_FB_TIMEOUT, slot, r->length, 0, (uint64_t)q->inflight_bytes, 0.0);
    }
    return 0;
}

/* QueuePair.port_status (down): what was in flight on that port is gone: repair it now */
void mrc_txe_port_down(struct mrc_txe_qp *q, uint32_t plane) {
    uint32_t span = (q->snd_nxt - q->snd_una) & MASK;
    for (uint32_t k = 0; k < span; k++) {
        struct mrc_txe_rec *r = rec_get(q, (q->snd_una + k) & MASK);
        if (r != NULL && !r->lost && q->plane_of[r->slot] == plane) {
            mark_lost(q, r);
            rtxq_append(q, r->psn);
        }
    }
}

/* QueuePair._fatal's clean-up */
void mrc_txe_reset(struct mrc_txe_qp *q) {
    uint32_t span = (q->snd_nxt - q->snd_una) & MASK;
    for (uint32_t k = 0; k < span; k++) {
        struct mrc_txe_rec *r = rec_get(q, (q->snd_una + k) & MASK);
        if (r != NULL) {
            r->live = 0;
        }
    }
    q->n_live = 0;
    q->inflight_bytes = 0;
    q->ord_n = 0;
    q->rtxq_n = 0;
    q->m_done = q->m_seg = q->m_tail;
    q->dead = 1;
}

/* --- moving the rings (mrc_txe.h) ------------------------------------------------------------ */

static int pow2(uint32_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

int mrc_txe_move(struct mrc_txe_qp *q, const struct mrc_txe_mem *to) {
    uint32_t R = to->rec_cap;
    if (!pow2(to->msg_cap) || !pow2(R) || R < 2 || !pow2(to->fifo_cap) || !pow2(to->ord_cap) ||
        !pow2(to->rtxq_cap) || !pow2(to->recov_cap) || to->heap_cap == 0 || to->fb_cap == 0 ||
        to->msgs == NULL || to->recs == NULL || to->work == NULL || to->fifo == NULL ||
        to->heap == NULL || to->ord == NULL || to->rtxq == NULL || to->fb == NULL ||
        to->recov_delay == NULL || to->recov_spur == NULL) {
        return -EINVAL;
    }
    if ((to->recs == q->recs && (to->fifo != q->fifo || to->heap != q->heap ||
                                 to->ord != q->ord || to->rtxq != q->rtxq || R != q->rec_cap ||
                                 to->work != q->work)) ||
        (to->msgs == q->msgs && to->msg_cap != q->msg_cap) ||
        (to->recov_delay == q->recov_delay) != (to->recov_spur == q->recov_spur) ||
        (to->recov_delay == q->recov_delay && to->recov_cap != q->recov_cap) ||
        (to->fb == q->fb && to->fb_cap != q->fb_cap)) {
        return -EINVAL; /* an array that stays keeps its length; the queues move with the
                           records they index */
    }
    /* what is live, counted against the new rings first: nothing moves unless all fits */
    /* (no live record: nothing to look for, even where a reset left snd_una behind) */
    uint32_t span = q->n_live ? (q->snd_nxt - q->snd_una) & MASK : 0, live = 0;
    for (uint32_t k = 0; k < span; k++) {
        live += rec_get(q, (q->snd_una + k) & MASK) != NULL;
    }
    if (live != q->n_live || span >= R || q->m_tail - q->m_done > to->msg_cap ||
        q->n_fb > to->fb_cap || to->fb_cap < 2 * R + 8) {
        return -ENOSPC;
    }
    if (to->recs != q->recs) {
        /* the queues keep only their live entries, as a full ring does (what they would pop
         * stays the same); then they fit, or nothing moves */
        fifo_compact(q);
        heap_compact(q);
        ord_compact(q);
        rtxq_compact(q);
        if (q->fifo_n > to->fifo_cap || q->heap_n > to->heap_cap || q->ord_n > to->ord_cap ||
            q->rtxq_n > to->rtxq_cap) {
            return -ENOSPC;
        }
    }
    /* the writes, by number */
    if (to->msgs != q->msgs) {
        for (uint64_t i = q->m_done; i < q->m_tail; i++) {
            to->msgs[i & (to->msg_cap - 1)] = q->msgs[i & (q->msg_cap - 1)];
        }
    }
    /* the recovery log: its newest entries, at their numbers modulo the new length */
    if (to->recov_delay != q->recov_delay) {
        uint64_t n = q->recov_count, keep = q->recov_cap < to->recov_cap ? q->recov_cap
                                                                           : to->recov_cap;
        for (uint64_t i = n > keep ? n - keep : 0; i < n; i++) {
            to->recov_delay[i % to->recov_cap] = q->recov_delay[i % q->recov_cap];
            to->recov_spur[i % to->recov_cap] = q->recov_spur[i % q->recov_cap];
        }
    }
    if (to->fb != q->fb && q->n_fb) {
        memcpy(to->fb, q->fb, (size_t)q->n_fb * sizeof(*q->fb));
    }
    if (to->recs != q->recs) { /* the compacted queues from their heads to index 0 */
        for (uint32_t i = 0; i < q->fifo_n; i++) {
            to->fifo[i] = q->fifo[(q->fifo_head + i) & (q->fifo_cap - 1)];
        }
        for (uint32_t i = 0; i < q->ord_n; i++) {
            to->ord[i] = q->ord[(q->ord_head + i) & (q->ord_cap - 1)];
        }
        for (uint32_t i = 0; i < q->rtxq_n; i++) {
            to->rtxq[i] = q->rtxq[(q->rtxq_head + i) & (q->rtxq_cap - 1)];
        }
        if (q->heap_n) {
            memcpy(to->heap, q->heap, (size_t)q->heap_n * sizeof(*q->heap));
        }
        q->fifo_head = q->ord_head = q->rtxq_head = 0;
        for (uint32_t j = 0; j < span; j++) {
            uint32_t psn = (q->snd_una + j) & MASK;
            struct mrc_txe_rec *r = rec_get(q, psn);
            if (r != NULL) {
                to->recs[psn & (R - 1)] = *r;
            }
        }
    }
    q->msgs = to->msgs;
    q->msg_cap = to->msg_cap;
    q->recs = to->recs;
    q->rec_cap = R;
    q->work = to->work;
    q->fifo = to->fifo;
    q->fifo_cap = to->fifo_cap;
    q->heap = to->heap;
    q->heap_cap = to->heap_cap;
    q->ord = to->ord;
    q->ord_cap = to->ord_cap;
    q->rtxq = to->rtxq;
    q->rtxq_cap = to->rtxq_cap;
    q->fb = to->fb;
    q->fb_cap = to->fb_cap;
    q->recov_delay = to->recov_delay;
    q->recov_spur = to->recov_spur;
    q->recov_cap = to->recov_cap;
    return 0;
}
