/* The receive engine: the responder's data path (see mrc_rxe.h). Each function names the
 * Python it is the twin of; the order of checks and counters follows it exactly. */
#include "mrc_rxe.h"

#include <errno.h>
#include <string.h>

#include "mrc_psnwin.h"
#include "mrc_roce.h"
#include "mrc_txe.h"
#include "mrc_crc.h"
#include "mrc_wire.h"

enum {
    OFF_UDP = MRC_WIRE_OFF_UDP,
    OFF_BTH = MRC_WIRE_OFF_BTH,
    OFF_SRC = MRC_WIRE_OFF_SRC,
    SACK_BODY = 40,
    NACK_BODY = 20,
    HALF = MRC_PSN_HALF,
    MASK = MRC_PSN_MASK,
    CE_RUN_ALWAYS_SKIP = 8, /* responder: CE marks in a row on one EV -> ALWAYS_SKIP */
    BITMAP_BITS = 64,
    SACK_ECE = 0x20000000 /* in the SACK body's first word, beside the mark and cack_psn */
};

/* The struct's arrays are sized by number (the cffi cdef takes no constant expressions):
 * hold them to the limits the header names. */
#define MRC_RXE_LEN(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(MRC_RXE_LEN(((struct mrc_rxe_qp *)0)->srcs) == MRC_RXE_MAX_SRCS, "srcs");
_Static_assert(MRC_RXE_LEN(((struct mrc_rxe_qp *)0)->reverse_bad) == MRC_RXE_MAX_REVERSE,
               "reverse_bad");
_Static_assert(MRC_RXE_LEN(((struct mrc_rxe_qp *)0)->events) == MRC_RXE_MAX_EVENTS, "events");
_Static_assert(MRC_RXE_LEN(((struct mrc_rxe_qp *)0)->plane_down) ==
                   MRC_RXE_LEN(((struct mrc_rxe_qp *)0)->reverse_k),
               "planes");

#include "mrc_bytes.inc"

/* --- EvTable.next_reverse_ev / reverse_ev_on ------------------------------------------------ */

static int rev_is_bad(const struct mrc_rxe_qp *q, uint32_t i) { return q->reverse_bad[i]; }

static uint32_t next_reverse(struct mrc_rxe_qp *q) {
    uint32_t n = q->n_reverse;
    for (int skip_bad = 1; skip_bad >= 0; skip_bad--) {
        for (uint32_t j = 0; j < n; j++) {
            uint32_t i = q->reverse_next;
            q->reverse_next = (q->reverse_next + 1) % n;
            uint32_t ev = q->tmpl[i].ev;
            if (!q->plane_down[ev % q->planes] && !(skip_bad && rev_is_bad(q, i))) {
                return i;
            }
        }
    }
    return 0;
}

static uint32_t reverse_on(struct mrc_rxe_qp *q, uint32_t plane) {
    if (q->plane_down[plane]) {
        return next_reverse(q);
    }
    uint32_t per = q->reverse_per_plane;
    for (uint32_t j = 0; j < per; j++) {
        uint32_t k = q->reverse_k[plane];
        q->reverse_k[plane] = (k + 1) % per;
        uint32_t i = k * q->planes + plane;
        if (i < q->n_reverse && !rev_is_bad(q, i)) {
            return i;
        }
    }
    return next_reverse(q);
}

/* --- control frames (QueuePair._ctrl_frame, Responder._sack_frame) ------------------------- */

/* Headers from template t, the BTH (op, dest QP, w2) and `body` bytes already in place at
 * OFF_BTH + 12; then the ICRC and the UDP checksum. Returns the frame length. */
static uint32_t finish_ctrl(uint8_t *f, const struct mrc_rxe_tmpl *t, uint32_t op,
                            uint32_t dest_qp, uint32_t w2, uint32_t body) {
    memcpy(f, t->hdr, sizeof(t->hdr));
    uint32_t end = OFF_BTH + 12 + body;
    uint32_t ulen = end + 4 - OFF_UDP;
    put16(f + 18, ulen);      /* IPv6 payload length */
    put16(f + OFF_UDP + 4, ulen);
    put16(f + OFF_UDP + 6, 0);
    f[OFF_BTH] = (uint8_t)op;
    f[OFF_BTH + 1] = 0;
    put16(f + OFF_BTH + 2, 0xFFFF);
    put32(f + OFF_BTH + 4, dest_qp);
    put32(f + OFF_BTH + 8, w2);
    put32(f + end, mrc_crc32(0, f + OFF_BTH, end - OFF_BTH));
    /* one's complement sum of the datagram as the Python twin computes it: the value of
     * its bytes modulo 0xFFFF (2^16 = 1 mod 0xFFFF), plus the pseudo-header */
    uint64_t s = (uint64_t)t->psum + ulen;
    const uint8_t *u = f + OFF_UDP;
    uint32_t i = 0;
    for (; i + 1 < ulen; i += 2) {
        s += be16(u + i);
    }
    if (i < ulen) {
        s += (uint32_t)u[i] << 8; /* an odd datagram: padded with a zero byte */
    }
    put16(f + OFF_UDP + 6, 0xFFFF - (uint32_t)(s % 0xFFFF));
    return end + 4;
}

static uint8_t *out_slot(struct mrc_rxe_out *out, uint32_t plane, uint32_t len) {
    uint8_t *f = out->buf + (size_t)out->n * out->slot_len;
    out->len[out->n] = len;
    out->plane[out->n] = (uint8_t)plane;
    out->n++;
    return f;
}

/* Responder._send_nack */
static void send_nack(struct mrc_rxe_qp *q, uint32_t reason, uint32_t psn, uint32_t ev,
                      uint64_t ts, int plane, struct mrc_rxe_out *out) {
    q->st.tx_nacks++;
    uint32_t i = plane < 0 ? next_reverse(q) : reverse_on(q, (uint32_t)plane);
    const struct mrc_rxe_tmpl *t = &q->tmpl[i];
    uint8_t *f = out->buf + (size_t)out->n * out->slot_len;
    uint8_t *b = f + OFF_BTH + 12;
    put32(b, reason << 24 | psn);
    put32(b + 4, ev);
    put32(b + 8, (q->win->expected - 1) & MASK);
    put64(b + 12, ts);
    uint32_t len = finish_ctrl(f, t, MRC_WIRE_OP_NACK, q->peer_qpn, psn, NACK_BODY);
    out_slot(out, t->ev % q->planes, len);
}

/* ResponderWindow._penalty_of */
static uint32_t penalty_of(const struct mrc_rxe_qp *q, uint32_t span) {
    uint32_t half = q->win->size / 2;
    if (span <= half) {
        return 0;
    }
    uint64_t p = (uint64_t)(span - half) * 127 / half;
    return p < 127 ? (uint32_t)p : 127;
}

/* ResponderWindow._lasthop_penalty */
static uint32_t lasthop_penalty(struct mrc_rxe_qp *q) {
    uint32_t trims = q->lasthop_trims;
    double frac = (trims || q->pending) ? (double)trims / (double)(trims + q->pending) : 0.0;
    q->lasthop_frac += (frac - q->lasthop_frac) * 0.25;
    q->lasthop_trims = 0;
    if (q->lasthop_frac < 1.0 / 512) {
        q->lasthop_frac = 0.0;
    }
    int64_t p = (int64_t)(q->lasthop_frac * 4 * 127);
    return p < 127 ? (uint32_t)p : 127;
}

static uint32_t ahead(uint32_t psn, uint32_t expected) {
    uint32_t d = (psn - expected) & MASK;
    return d >= HALF ? 0 : d;
}

/* Responder._send_sack with ResponderWindow.sack_values; frames to out (room checked by the
 * caller: two slots). */
static void send_sack(struct mrc_rxe_qp *q, uint32_t op, uint32_t psn, uint32_t ev, uint64_t ts,
                      int ce, uint32_t plane, int twice, struct mrc_rxe_out *out) {
    int ece = ce || q->ece_pending;
    struct mrc_psnwin *w = q->win;
    uint32_t expected = w->expected;
    uint32_t cack = (expected - 1) & MASK;
    int64_t h = (w->highest - expected) & MASK;
    uint32_t pen;
    if (h >= HALF) {
        h = -1;
        pen = 0;
    } else {
        pen = (h + 1 < HALF) ? penalty_of(q, (uint32_t)h + 1) : 0;
    }
    if (q->lasthop_trims || q->lasthop_frac != 0.0) {
        uint32_t lp = lasthop_penalty(q);
        pen = lp > pen ? lp : pen;
    }
    int64_t d = (psn - expected) & MASK;
    if (d >= HALF) {
        d = 0;
    }
    int64_t lo = d;
    if (q->pending) {
        int64_t a = ahead((uint32_t)q->pending_lo, expected);
        lo = a < d ? a : d;
    }
    int64_t o = h - (BITMAP_BITS - 1);
    o = lo < o ? lo : o;
    uint32_t offset = o > 0 ? (uint32_t)o : 0;
    uint64_t bitmap = 0;
    uint32_t ooo = 0;
    if (h >= 0) {
        bitmap = mrc_psnwin_sack_bitmap(w, offset);
        int64_t x = h + 1 - (int64_t)mrc_psnwin_holes(w);
        ooo = x < 0xFFFF ? (uint32_t)x : 0xFFFF;
    }
    q->pending = 0;
    q->pending_lo = -1;
    q->ece_pending = 0;
    uint32_t w0;
    if (ce) {
        uint32_t run = 0;
        for (uint32_t i = 0; i < q->n_ce; i++) {
            if (q->ce[i].ev == ev) {
                run = q->ce[i].run;
                break;
            }
        }
        uint32_t mark = run >= CE_RUN_ALWAYS_SKIP ? MRC_WIRE_SACK_MARK_ALWAYS_SKIP
                                                  : MRC_WIRE_SACK_MARK_SKIP_ONCE;
        w0 = mark << 30 | SACK_ECE | cack;
    } else {
        w0 = ece ? SACK_ECE | cack : cack;
    }
    q->ack_armed = 0;
    q->st.tx_sacks++;
    q->sacked = 1;
    uint32_t copies = 1;
    uint32_t idx[2];
    idx[0] = reverse_on(q, plane);
    if (twice) {
        for (uint32_t j = 0; j < q->n_reverse; j++) {
            uint32_t other = next_reverse(q);
            if (q->tmpl[other].ev % q->planes != plane) {
                idx[copies++] = other;
                break;
            }
        }
    }
    for (uint32_t c = 0; c < copies; c++) {
        const struct mrc_rxe_tmpl *t = &q->tmpl[idx[c]];
        uint8_t *f = out->buf + (size_t)out->n * out->slot_len;
        uint8_t *b = f + OFF_BTH + 12;
        put32(b, w0);
        put16(b + 4, offset);
        b[6] = (uint8_t)pen;
        b[7] = 0;
        put64(b + 8, bitmap);
        put32(b + 16, ev);
        put16(b + 20, ooo);
        put16(b + 22, 0);
        put64(b + 24, ts);
        put64(b + 32, q->received_bytes);
        uint32_t len = finish_ctrl(f, t, op, q->peer_qpn, cack, SACK_BODY);
        out_slot(out, t->ev % q->planes, len);
    }
}

/* --- placement (MemoryTable.place) --------------------------------------------------------- */

struct mrc_rxe_region *mrc_rxe_find_region(struct mrc_rxe_regions *mem, uint32_t rkey) {
    for (uint32_t i = 0; i < mem->n; i++) {
        if (mem->r[i].rkey == rkey) {
            return &mem->r[i];
        }
    }
    return NULL;
}

/* Where the message of a data packet may start: at hi - j * step for one j in [0, steps]
 * (memory.message_fits). Returns 0 when the sizes do not fit the opcode (no message can
 * hold the packet), else 1. Every start is checked against the region by message_fits, so
 * none of this can underflow into a start that fits: a start below 0 is refused here. */
static int message_span(uint32_t op, uint64_t va, uint32_t plen, uint32_t length, uint32_t mtu,
                        uint64_t *hi, uint64_t *steps) {
    *steps = 0;
    if (plen > mtu || mtu == 0) {
        return 0;
    }
    if (op == MRC_WIRE_OP_WRITE_FIRST) {
        *hi = va;
        return plen == mtu && length > mtu;
    }
    if (op == MRC_WIRE_OP_WRITE_MIDDLE) {
        uint64_t n = ((uint64_t)length + mtu - 1) / mtu;
        if (plen != mtu || n < 3 || va < mtu) {
            return 0;
        }
        *hi = va - mtu;
        *steps = n - 3;
        return 1;
    }
    if (op == MRC_WIRE_OP_WRITE_LAST || op == MRC_WIRE_OP_WRITE_LAST_IMM) {
        uint32_t rest = length - plen;
        if (length <= mtu || plen == 0 || rest % mtu != 0 || va < rest) {
            return 0;
        }
        *hi = va - rest;
        return 1;
    }
    *hi = va; /* ONLY, ONLY_IMM */
    return plen == length;
}

/* memory.message_fits: does a start the span allows put the whole message of `length`
 * bytes inside region r? The highest start at or below the last one that fits is tried. */
static int message_fits(const struct mrc_rxe_region *r, uint64_t hi, uint64_t steps,
                        uint32_t step, uint32_t length) {
    if (length > r->length || hi < r->base_va) {
        return 0;
    }
    uint64_t top = r->base_va + (r->length - length); /* the last start that fits */
    uint64_t j = hi <= top ? 0 : (hi - top + step - 1) / step;
    if (j > steps) {
        return 0;
    }
    /* j <= steps keeps j * step within hi - lo: no overflow */
    return hi - r->base_va >= j * step;
}

/* 0: placed; else the PlaceStatus of mrcnic.transport.memory (1 bad R_Key, 2 no permission,
 * 3 out of bounds: a byte of the packet, or of its whole message, outside the region) */
static int place(struct mrc_rxe_regions *mem, uint32_t rkey, uint64_t va, const uint8_t *src,
                 uint32_t n, uint32_t op, uint32_t length, uint32_t mtu) {
    struct mrc_rxe_region *r = mrc_rxe_find_region(mem, rkey);
    if (r == NULL) {
        return 1;
    }
    if (!r->remote_write) {
        return 2;
    }
    uint64_t off = va - r->base_va;
    if (va < r->base_va || off > r->length || n > r->length - off) {
        return 3;
    }
    uint64_t hi, steps;
    if (!message_span(op, va, n, length, mtu, &hi, &steps) ||
        !message_fits(r, hi, steps, mtu, length)) {
        return 3;
    }
    memcpy(r->ptr + off, src, n);
    r->bytes_placed += n;
    return 0;
}

/* --- the data path (Responder._rx_data, _rx_placed, _rx_deliver) --------------------------- */

static void event(struct mrc_rxe_qp *q, int32_t kind, uint32_t a, uint32_t b, uint32_t c,
                  double t) {
    if (q->n_events >= MRC_RXE_MAX_EVENTS) {
        return; /* (unreachable: deliver() stops first, the others have room checked) */
    }
    struct mrc_rxe_event *e = &q->events[q->n_events++];
    e->kind = kind;
    e->a = a;
    e->b = b;
    e->c = c;
    e->t_s = t;
}

/* Messages complete in MSN order: each done one from rx_msn on, with its ImmReceived. When
 * the events are full (more writes with immediate were waiting than there is room for), it
 * stops there, deliver_pending set: the shell drains the events and calls mrc_rxe_resume,
 * and no frame is taken before (their events come after these, as in the twin). */
static void deliver(struct mrc_rxe_qp *q, double now_s) {
    uint16_t msn = q->rx_msn;
    q->deliver_pending = 0;
    for (;;) {
        struct mrc_rxe_msg *m = &q->msgs[msn & (q->msg_cap - 1)];
        if (!m->done) {
            break;
        }
        if (m->has_imm && q->n_events >= MRC_RXE_MAX_EVENTS) {
            q->deliver_pending = 1;
            q->deliver_t_s = now_s;
            break;
        }
        m->done = 0;
        if (m->has_imm) {
            m->has_imm = 0;
            event(q, MRC_RXE_EV_IMM, m->imm, m->length, m->rqmsn, now_s);
            q->rx_rqmsn = (uint16_t)(m->rqmsn + 1);
        }
        msn = (uint16_t)(msn + 1);
    }
    q->rx_msn = msn;
}

static void ce_note(struct mrc_rxe_qp *q, uint32_t ev, int ce) {
    uint32_t i = 0;
    while (i < q->n_ce && q->ce[i].ev != ev) {
        i++;
    }
    if (ce) {
        if (i == q->n_ce) {
            if (q->n_ce >= q->ce_cap) { /* (ce_cap is CE_EVS by then: the shell grew it) */
                q->n_ce = 0; /* keyed by an EV from the wire: bounded, starts over */
                i = 0;
            }
            q->ce[i].ev = ev;
            q->ce[i].run = 0;
            q->n_ce++;
        }
        q->ce[i].run++;
        q->ece_pending = 1;
    } else if (i < q->n_ce) {
        q->ce[i] = q->ce[--q->n_ce];
    }
}

int mrc_rxe_frame(struct mrc_rxe_qp *q, struct mrc_rxe_regions *mem, const uint8_t *f,
                  uint32_t n, double now_s, struct mrc_rxe_out *out) {
    if (q->dead) {
        q->st.rx_closed++;
        return 1;
    }
    if (q->deliver_pending && mrc_rxe_resume(q)) {
        return -1; /* what completed earlier is reported first */
    }
    if (out->n + 2 > out->cap || q->n_events + 1 > MRC_RXE_MAX_EVENTS) {
        return -1;
    }
    if (n < OFF_BTH + 12) {
        q->st.rx_malformed++;
        return 1;
    }
    uint32_t ip_w0 = be32(f + 14);
    uint32_t end = OFF_UDP + be16(f + 18);
    if (be16(f + 12) != MRC_WIRE_ETHERTYPE_IPV6 || ip_w0 >> 28 != 6 || f[20] != 17 || end > n ||
        end < OFF_UDP + 20) {
        q->st.rx_malformed++;
        return 1;
    }
    if (!known_source(f + OFF_SRC, (const uint8_t(*)[16])q->srcs,
                      q->n_srcs < MRC_RXE_MAX_SRCS ? q->n_srcs : MRC_RXE_MAX_SRCS)) {
        q->st.rx_foreign++;
        return 1;
    }
    uint32_t op = f[OFF_BTH];
    if (op < MRC_WIRE_OP_WRITE_FIRST || op > MRC_WIRE_OP_WRITE_ONLY_IMM) {
        return 0;
    }
    uint32_t dscp = (ip_w0 >> 22) & 0x3F;
    int trimmed = dscp == MRC_WIRE_DSCP_TRIMMED || dscp == MRC_WIRE_DSCP_TRIMMED_LASTHOP;
    int imm = op == MRC_WIRE_OP_WRITE_LAST_IMM || op == MRC_WIRE_OP_WRITE_ONLY_IMM;
    /* the timestamp extension is optional (the BTH T flag) */
    int has_ts = (f[OFF_BTH + 4] & MRC_WIRE_BTH_FLAG_TS) != 0;
    uint32_t hdr_end = OFF_BTH + (imm ? 44 : 40) - (has_ts ? 0 : 8);
    if (end < hdr_end + (trimmed ? 0 : 4)) {
        q->st.rx_malformed++;
        return 1;
    }
    if (!trimmed && mrc_crc32(0, f + OFF_BTH, end - 4 - OFF_BTH) != be32(f + end - 4)) {
        q->st.rx_malformed++;
        return 1;
    }
    const uint8_t *h = f + OFF_BTH + 4;
    uint32_t w1 = be32(h), w2 = be32(h + 4);
    uint32_t msn = be16(h + 8), rqmsn = be16(h + 10);
    const uint8_t *reth = h + (has_ts ? 20 : 12);
    uint64_t ts = has_ts ? be64(h + 12) : 0, va = be64(reth);
    uint32_t rkey = be32(reth + 8), length = be32(reth + 12);
    if ((w1 & MASK) != q->qpn) {
        q->st.rx_malformed++;
        return 1;
    }
    uint32_t psn = w2 & MASK;
    uint32_t ev = (uint32_t)f[OFF_UDP] << 24 | (uint32_t)f[OFF_UDP + 1] << 16 | (ip_w0 & 0xFFFF);
    int ce = ((ip_w0 >> 20) & 3) == 3;
    uint32_t ahead = (msn - q->rx_msn) & 0xFFFF;
    if (ahead < MRC_RXE_MSN_WINDOW && ahead >= q->msg_cap) {
        q->want |= MRC_RXE_WANT_MSGS;
    }
    if (ce && q->n_ce >= q->ce_cap && q->ce_cap < MRC_RXE_CE_EVS) {
        q->want |= MRC_RXE_WANT_CE;
    }
    if (q->want) {
        return -1; /* nothing counted yet: the shell gives the tables room, then calls again */
    }
    uint32_t plane = ev % q->planes;
    q->st.rx_data_packets++;
    if (ce) {
        q->st.rx_ecn_marked++;
    }
    struct mrc_psnwin *w = q->win;
    if (trimmed) {
        q->st.rx_trimmed++;
        if (dscp == MRC_WIRE_DSCP_TRIMMED_LASTHOP) {
            q->lasthop_trims++;
        }
        uint32_t reason = dscp == MRC_WIRE_DSCP_TRIMMED ? MRC_WIRE_NACK_TRIMMED
                                                        : MRC_WIRE_NACK_TRIMMED_LASTHOP;
        if (mrc_psnwin_test(w, psn) != 1) {
            send_nack(q, reason, psn, ev, ts, (int)plane, out);
        }
        return 1;
    }
    uint32_t d = (psn - w->expected) & MASK;
    if (d < HALF && d >= w->size) {
        q->st.rx_psn_out_of_window++;
        send_nack(q, MRC_WIRE_NACK_PSN_OOR_WINDOW, psn, ev, ts, (int)plane, out);
        return 1;
    }
    if (d >= HALF || (d && mrc_psnwin_test(w, psn) == 1)) {
        q->st.rx_duplicates++;
        send_sack(q, MRC_WIRE_OP_SACK, psn, ev, ts, ce, plane, 1, out);
        return 1;
    }
    if (((msn - q->rx_msn) & 0xFFFF) >= MRC_RXE_MSN_WINDOW) {
        q->st.rx_msn_out_of_range++;
        return 1;
    }
    uint32_t plen = end - 4 - hdr_end;
    int refused = place(mem, rkey, va, f + hdr_end, plen, op, length, q->mtu);
    if (refused != 0) {
        q->st.rx_refused++;
        if (refused == 1) {
            q->st.rx_bad_rkey++;
        } else if (refused == 2) {
            q->st.rx_no_permission++;
        } else {
            q->st.rx_out_of_bounds++;
        }
        send_nack(q, MRC_WIRE_NACK_REMOTE_ACCESS_ERROR, psn, ev, ts, -1, out);
        /* as an RC responder: a refused write ends the QP (nothing more lands) */
        event(q, MRC_RXE_EV_REFUSED, psn, rkey, (uint32_t)refused, now_s);
        q->dead = 1;
        return 1;
    }
    /* ResponderWindow.receive (the window was asked: the mark is new) */
    mrc_psnwin_mark(w, psn);
    if (psn == w->expected) {
        mrc_psnwin_advance(w);
    }
    if (q->pending == 0 || ((psn - (uint32_t)q->pending_lo) & MASK) >= HALF) {
        q->pending_lo = psn;
    }
    q->pending++;
    q->st.rx_placed_packets++;
    q->st.rx_placed_bytes += plen;
    q->received_bytes += plen;
    struct mrc_rxe_msg *m = &q->msgs[msn & (q->msg_cap - 1)];
    if (imm) {
        /* Responder._rx_imm_check */
        uint32_t ahead_n = (rqmsn - q->rx_rqmsn) & 0xFFFF;
        if (ahead_n >= q->max_wimm_inflight && ahead_n < 0x8000) {
            send_nack(q, MRC_WIRE_NACK_UNEXP_EVENT, psn, ev, ts, -1, out);
            event(q, MRC_RXE_EV_WIMM_FATAL, ahead_n + 1, 0, 0, now_s);
            q->dead = 1;
            return 1;
        }
        m->has_imm = 1;
        m->rqmsn = (uint16_t)rqmsn;
        m->imm = be32(f + hdr_end - 4);
    }
    /* Responder._rx_placed: message accounting, completion in MSN order */
    uint64_t got = (uint64_t)m->bytes + plen;
    if (got >= length) {
        m->bytes = 0;
        if (msn == q->rx_msn && !m->has_imm) {
            q->rx_msn = (uint16_t)(msn + 1);
            deliver(q, now_s);
        } else {
            m->done = 1;
            m->length = length;
            deliver(q, now_s);
        }
    } else {
        m->bytes = (uint32_t)got;
    }
    if (ce || q->n_ce) {
        ce_note(q, ev, ce);
    }
    int rtx = (w1 >> 24) & MRC_WIRE_BTH_FLAG_RTX;
    if (ce || rtx || (w2 & (uint32_t)MRC_WIRE_BTH_ACKREQ) || q->pending >= q->ack_every) {
        send_sack(q, MRC_WIRE_OP_SACK, psn, ev, ts, ce, plane, rtx != 0, out);
    } else {
        q->trig_psn = psn;
        q->trig_ev = ev;
        q->trig_ts = ts;
        q->trig_ce = (uint8_t)ce;
        if (!q->ack_armed) {
            q->ack_armed = 1;
            q->ack_deadline_s = now_s + q->ack_delay_s;
        }
    }
    return 1;
}

int mrc_rxe_resume(struct mrc_rxe_qp *q) {
    if (q->deliver_pending) {
        deliver(q, q->deliver_t_s);
    }
    return q->deliver_pending;
}

int mrc_rxe_ack_timer(struct mrc_rxe_qp *q, double now_s, struct mrc_rxe_out *out) {
    if (!q->ack_armed || q->ack_deadline_s > now_s) {
        return 0;
    }
    if (out->n + 2 > out->cap) {
        return -1;
    }
    q->ack_armed = 0;
    if (!q->pending || q->dead) {
        return 0;
    }
    send_sack(q, MRC_WIRE_OP_SACK, q->trig_psn, q->trig_ev, q->trig_ts, q->trig_ce,
              q->trig_ev % q->planes, 0, out);
    return 1;
}

int mrc_rxe_ack(struct mrc_rxe_qp *q, uint32_t op, uint32_t ev, uint64_t ts, int ce,
                uint32_t plane, struct mrc_rxe_out *out) {
    if (out->n + 2 > out->cap) {
        return -1;
    }
    send_sack(q, op, (q->win->expected - 1) & MASK, ev, ts, ce, plane % q->planes, 0, out);
    return 1;
}

_Static_assert(MRC_RXE_LEN(((struct mrc_rxe_dev *)0)->qpn) == MRC_RXE_MAX_QPS, "qpn");
_Static_assert(MRC_RXE_LEN(((struct mrc_rxe_dev *)0)->slot) == MRC_RXE_QP_SLOTS, "slot");
_Static_assert(MRC_RXE_QP_SLOTS >= 2 * MRC_RXE_MAX_QPS, "the index stays at most half full");

static inline uint32_t qp_slot(uint32_t qpn) {
    return (qpn * 2654435761u) >> (32 - 11); /* 2048 slots: the top 11 bits of a mix */
}

void mrc_rxe_dev_index(struct mrc_rxe_dev *d) {
    for (uint32_t s = 0; s < MRC_RXE_QP_SLOTS; s++) {
        d->slot[s] = -1;
    }
    uint32_t n = d->n < MRC_RXE_MAX_QPS ? d->n : MRC_RXE_MAX_QPS;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t s = qp_slot(d->qpn[j]);
        while (d->slot[s] >= 0) {
            s = (s + 1) & (MRC_RXE_QP_SLOTS - 1);
        }
        d->slot[s] = (int16_t)j;
    }
}

int32_t mrc_rxe_dev_find(const struct mrc_rxe_dev *d, uint32_t qpn) {
    uint32_t n = d->n < MRC_RXE_MAX_QPS ? d->n : MRC_RXE_MAX_QPS;
    for (uint32_t s = qp_slot(qpn);; s = (s + 1) & (MRC_RXE_QP_SLOTS - 1)) {
        int32_t j = d->slot[s];
        if (j < 0) {
            return -1;
        }
        if ((uint32_t)j < n && d->qpn[j] == qpn) {
            return j;
        }
    }
}

/* The engine entry a frame of len bytes goes to, or -1 (the shell's: not MRC/RoCEv2 over
 * UDP 4791 with room for a BTH, or a QP without an engine). */
static int32_t frame_entry(const struct mrc_rxe_dev *d, uint32_t nq, const uint8_t *f,
                           uint32_t len) {
    /* peek_dest_qp's rules: anything but IPv6/UDP to port 4791 with room for a BTH is the
     * shell's (counted rx_not_mrc there), whatever QP number it seems to carry */
    if (len < OFF_BTH + 12 || be16(f + 12) != MRC_WIRE_ETHERTYPE_IPV6 ||
        f[20] != MRC_WIRE_IPPROTO_UDP || be16(f + OFF_UDP + 2) != MRC_WIRE_MRC_UDP_PORT) {
        return -1;
    }
    return nq ? mrc_rxe_dev_find(d, be32(f + OFF_BTH + 4) & MASK) : -1;
}

void mrc_rxe_scan(struct mrc_rxe_dev *d, const uint8_t *buf, const uint32_t *offs,
                  const uint32_t *lens, uint32_t n, uint32_t slot_len) {
    for (uint32_t k = 0; k < d->n_touched && k < MRC_RXE_LEN(d->touched); k++) {
        d->mark[d->touched[k]] = 0;
    }
    d->n_touched = 0;
    uint32_t nq = d->n < MRC_RXE_LEN(d->qpn) ? d->n : MRC_RXE_LEN(d->qpn);
    for (uint32_t i = 0; i < n; i++) {
        int32_t j = lens[i] > slot_len ? -1 : frame_entry(d, nq, buf + offs[i], lens[i]);
        if (j >= 0 && !d->mark[j]) { /* j < nq <= 1024: every entry fits the list once */
            d->mark[j] = 1;
            d->touched[d->n_touched++] = (uint16_t)j;
        }
    }
}

int mrc_rxe_dispatch(struct mrc_rxe_dev *d, const uint8_t *buf, const uint32_t *offs,
                     const uint32_t *lens, uint32_t n, uint32_t slot_len, double now_s,
                     int8_t *done) {
    uint32_t i = 0;
    d->n_rest = 0;
    d->grow = 0;
    uint32_t nq = d->n < MRC_RXE_LEN(d->qpn) ? d->n : MRC_RXE_LEN(d->qpn);
    for (; i < n; i++) {
        uint32_t len = lens[i];
        if (len > slot_len) {
            done[i] = 2;
            d->n_rest++;
            continue;
        }
        const uint8_t *f = buf + offs[i];
        done[i] = 0;
        int32_t found = frame_entry(d, nq, f, len);
        if (found < 0) { /* not a QP with an engine: the shell's, after the batch */
            d->n_rest++;
            continue;
        }
        uint32_t op = f[OFF_BTH];
        uint32_t j = (uint32_t)found;
        int r = 0;
        struct mrc_rxe_qp *q = d->qp[j];
        if (d->roce[j] != NULL) { /* a RoCEv2 QP: every frame to its engine */
            r = mrc_roce_frame(d->roce[j], d->mem, f, len, now_s, d->out);
        } else if (q->dead || (d->txq[j] != NULL && d->txq[j]->dead)) {
            /* failed earlier in this batch: as the twin, whose QP is in ERROR by now */
            q->st.rx_closed++;
            done[i] = 1;
            continue;
        } else if (op >= MRC_WIRE_OP_WRITE_FIRST && op <= MRC_WIRE_OP_WRITE_ONLY_IMM) {
            r = mrc_rxe_frame(q, d->mem, f, len, now_s, d->out);
        } else if ((op == MRC_WIRE_OP_SACK || op == MRC_WIRE_OP_ACK) && d->txq[j] != NULL) {
            r = mrc_txe_frame(d->txq[j], f, len, now_s);
        }
        if (r < 0) {
            if (q != NULL && q->want) {
                d->grow = j + 1;
            }
            break;
        }
        done[i] = (int8_t)r;
        if (r == 0) {
            /* a frame of an engine's QP that Python must take (a NACK, a probe...): stop, so
             * that it is taken in its place among the QP's frames */
            d->n_rest++;
            d->stopped = 1;
            return (int)i + 1;
        }
    }
    return (int)i;
}

/* --- moving the tables (mrc_rxe.h) ------------------------------------------------------------ */

static inline int msg_open(const struct mrc_rxe_msg *m) {
    return m->bytes || m->done || m->has_imm;
}

int mrc_rxe_fits(const struct mrc_rxe_qp *q, uint32_t msg_cap) {
    for (uint32_t k = msg_cap; k < q->msg_cap; k++) { /* (a smaller table: what it leaves) */
        if (msg_open(&q->msgs[(uint16_t)(q->rx_msn + k) & (q->msg_cap - 1)])) {
            return 0;
        }
    }
    return 1;
}

int mrc_rxe_move(struct mrc_rxe_qp *q, const struct mrc_rxe_mem *to) {
    uint32_t cap = to->msg_cap;
    if (to->msgs == NULL || to->ce == NULL || cap == 0 || (cap & (cap - 1)) ||
        cap > MRC_RXE_MSN_WINDOW || to->ce_cap == 0 || to->ce_cap > MRC_RXE_CE_EVS ||
        (to->msgs == q->msgs && cap != q->msg_cap) || (to->ce == q->ce && to->ce_cap != q->ce_cap)) {
        return -EINVAL;
    }
    if (q->n_ce > to->ce_cap) {
        return -ENOSPC;
    }
    if (to->msgs != q->msgs) {
        if (!mrc_rxe_fits(q, cap)) {
            return -ENOSPC;
        }
        for (uint32_t k = 0; k < q->msg_cap && k < cap; k++) {
            uint16_t msn = (uint16_t)(q->rx_msn + k);
            to->msgs[msn & (cap - 1)] = q->msgs[msn & (q->msg_cap - 1)];
        }
    }
    if (to->ce != q->ce && q->n_ce) {
        memcpy(to->ce, q->ce, (size_t)q->n_ce * sizeof(*q->ce));
    }
    q->msgs = to->msgs;
    q->msg_cap = cap;
    q->ce = to->ce;
    q->ce_cap = to->ce_cap;
    q->want = 0;
    return 0;
}
