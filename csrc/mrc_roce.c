#include "mrc_roce.h"
#include <string.h>
#include "mrc_checksum.h"
#include "mrc_crc.h"
#include "mrc_psnwin.h"
#include "mrc_rxe.h"
#include "mrc_trim.h"
#include "mrc_txe.h"
#include "mrc_wire.h"
#include "mrc_bytes.inc"

/* RoceQueuePair's constants, from the wire facts */
enum {
    MASK = MRC_PSN_MASK,
    HALF = MRC_PSN_HALF,
    OFF_IP = MRC_WIRE_OFF_IPV6,
    OFF_UDP = MRC_WIRE_OFF_UDP,
    OFF_BTH = MRC_WIRE_OFF_BTH,
    BTH = MRC_WIRE_BTH_SIZE,
    RETH = 16,
    IMM = 4,
    ICRC = MRC_WIRE_ICRC_SIZE,
    AETH = 4,
    HEAD = OFF_BTH + 8, /* the ICRC's masked part ends with the BTH's first 8 bytes */
    ACK_LEN = BTH + AETH + ICRC,
    CNP_LEN = BTH + MRC_ROCE_CNP_RESERVED_SIZE + ICRC,
    LBLEN = 32 /* the locator block of usid.final_destination's default format */
};

static inline int is_reth(uint32_t op) {
    return op == MRC_WIRE_OP_RC_WRITE_FIRST || op == MRC_WIRE_OP_RC_WRITE_ONLY ||
           op == MRC_WIRE_OP_RC_WRITE_ONLY_IMM;
}

static inline int is_imm(uint32_t op) {
    return op == MRC_WIRE_OP_RC_WRITE_LAST_IMM || op == MRC_WIRE_OP_RC_WRITE_ONLY_IMM;
}

static inline int is_last(uint32_t op) {
    return op >= MRC_WIRE_OP_RC_WRITE_LAST && op <= MRC_WIRE_OP_RC_WRITE_ONLY_IMM;
}

/* --- frames ------------------------------------------------------------------------------ */

/* roce_icrc.icrc: CRC-32 over 8 bytes of ones, the headers with the fields routers change
 * masked to ones (a copy of them, the destination address replaced by dst), then the rest up
 * to `at`; stored least significant byte first */
static uint32_t icrc_of(const uint8_t *f, uint32_t at, const uint8_t *dst) {
    static const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    uint8_t head[HEAD - OFF_IP];
    memcpy(head, f + OFF_IP, sizeof head);
    head[0] |= 0x0F;
    head[1] = head[2] = head[3] = 0xFF;
    head[7] = 0xFF;
    memcpy(head + (MRC_WIRE_OFF_DST - OFF_IP), dst, 16);
    head[MRC_WIRE_OFF_UDP_CHECKSUM - OFF_IP] = head[MRC_WIRE_OFF_UDP_CHECKSUM - OFF_IP + 1] = 0xFF;
    head[OFF_BTH - OFF_IP + 4] = 0xFF;
    uint32_t crc = mrc_crc32(mrc_crc32(0, ones, 8), head, sizeof head);
    return mrc_crc32(crc, f + HEAD, at - HEAD);
}

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The headers of a frame of `total` bytes with IPv6 word 0 `w0`, the body already at
 * OFF_BTH: lengths, ICRC and UDP checksum (RoceQueuePair._data_frame, _ctrl_frame) */
static uint32_t finish(const struct mrc_roce_qp *q, uint8_t *f, uint32_t total, uint32_t w0) {
    memcpy(f, q->hdr, OFF_BTH);
    uint32_t ulen = total - OFF_UDP;
    put32(f + OFF_IP, w0);
    put16(f + MRC_WIRE_OFF_PAYLOAD_LENGTH, ulen);
    put16(f + MRC_WIRE_OFF_UDP_LENGTH, ulen);
    uint32_t crc = icrc_of(f, total - ICRC, q->final);
    uint8_t *c = f + total - ICRC;
    c[0] = (uint8_t)crc;
    c[1] = (uint8_t)(crc >> 8);
    c[2] = (uint8_t)(crc >> 16);
    c[3] = (uint8_t)(crc >> 24);
    put16(f + MRC_WIRE_OFF_UDP_CHECKSUM,
          (uint32_t)mrc_udp6_checksum(q->src, 16, q->final, 16, f + OFF_UDP, ulen));
    return total;
}

static void put_bth(uint8_t *b, uint32_t op, uint32_t w1, uint32_t w2) {
    b[0] = (uint8_t)op;
    b[1] = 0;
    put16(b + 2, MRC_WIRE_DEFAULT_PKEY);
    put32(b + 4, w1);
    put32(b + 8, w2);
}

/* the control frame whose body is `len` bytes (ICRC room included) at out's next slot */
static void ctrl_out(struct mrc_roce_qp *q, struct mrc_rxe_out *out, uint8_t *f, uint32_t len) {
    out->len[out->n] = finish(q, f, OFF_BTH + len, q->ctrl_w0);
    out->plane[out->n] = (uint8_t)q->plane;
    out->n++;
}

static inline uint8_t *ctrl_slot(struct mrc_rxe_out *out) {
    return out->buf + (size_t)out->n * out->slot_len;
}

/* RoceQueuePair._send_ack */
static void send_ack(struct mrc_roce_qp *q, uint32_t syndrome, uint32_t psn,
                     struct mrc_rxe_out *out) {
    uint8_t *f = ctrl_slot(out);
    put_bth(f + OFF_BTH, MRC_WIRE_OP_RC_ACK, q->peer_qpn, psn & MASK);
    put32(f + OFF_BTH + BTH, syndrome << 24 | q->rx_msn);
    ctrl_out(q, out, f, ACK_LEN);
    q->unacked = 0;
    q->ack_armed = 0;
    if (syndrome == MRC_ROCE_SYN_ACK) {
        q->st.tx_acks++;
    } else {
        q->st.tx_nacks++;
    }
}

int mrc_roce_next_timer(const struct mrc_roce_qp *q, double *at) {
    int any = q->deadline_armed;
    double t = q->deadline_s;
    if (q->ack_armed && (!any || q->ack_deadline_s < t)) {
        t = q->ack_deadline_s;
        any = 1;
    }
    if (q->pace_blocked) {
        double p = q->next_tx_s + q->pace_burst_s; /* (a burst's worth of time at once) */
        if (!any || p < t) {
            t = p;
            any = 1;
        }
    }
    *at = t;
    return any;
}

int mrc_roce_ack_timer(struct mrc_roce_qp *q, double now_s, struct mrc_rxe_out *out) {
    if (!q->ack_armed || q->ack_deadline_s > now_s) {
        return 0;
    }
    if (out->n + 1 > out->cap) {
        return -1;
    }
    q->ack_armed = 0;
    if (q->unacked == 0) {
        return 0;
    }
    send_ack(q, MRC_ROCE_SYN_ACK, (q->epsn - 1) & MASK, out);
    return 1;
}

/* RoceQueuePair._maybe_cnp */
static void maybe_cnp(struct mrc_roce_qp *q, double now_s, struct mrc_rxe_out *out) {
    if (now_s - q->last_cnp_s < q->cnp_interval_s) {
        q->st.cnps_suppressed++;
        return;
    }
    q->last_cnp_s = now_s;
    q->st.tx_cnps++;
    uint8_t *f = ctrl_slot(out);
    put_bth(f + OFF_BTH, MRC_ROCE_OP_CNP, (uint32_t)MRC_WIRE_BTH_FLAG_BECN << 24 | q->peer_qpn,
            0);
    memset(f + OFF_BTH + BTH, 0, MRC_ROCE_CNP_RESERVED_SIZE);
    ctrl_out(q, out, f, CNP_LEN);
}

/* --- the requester ----------------------------------------------------------------------- */

static inline struct mrc_roce_msg *msg_at(struct mrc_roce_qp *q, uint64_t k) {
    return &q->msgs[k & (q->msg_cap - 1)];
}

/* RoceQueuePair._segment: cut the next packet (PSN seg_psn); 0 when nothing is left */
static int cut(struct mrc_roce_qp *q) {
    if (q->m_seg == q->m_tail) {
        return 0;
    }
    struct mrc_roce_msg *m = msg_at(q, q->m_seg);
    uint32_t off = m->next_off;
    uint32_t n = m->length - off < q->mtu ? m->length - off : q->mtu;
    m->next_off = off + n;
    m->cut++;
    m->end_psn = (q->seg_psn + 1) & MASK;
    if (off + n >= m->length) {
        m->last_psn = q->seg_psn;
        m->has_last = 1;
        q->m_seg++;
    }
    q->seg_psn = (q->seg_psn + 1) & MASK;
    return 1;
}

/* How far back from the end of message m's packets cut so far PSN psn is (1: its last one),
 * or 0 when m holds no such packet. Unambiguous however long m is: the PSNs asked about are
 * outstanding, so fewer than half the PSN space behind the newest. */
static uint64_t back_of(const struct mrc_roce_msg *m, uint32_t psn) {
    uint32_t d = (m->end_psn - psn - 1) & MASK;
    return m->cut && d < HALF && (uint64_t)d < m->cut ? (uint64_t)d + 1 : 0;
}

uint64_t mrc_roce_msg_of(struct mrc_roce_qp *q, uint32_t psn) {
    uint64_t k = q->cur;
    if (k >= q->m_done && k < q->m_tail && back_of(msg_at(q, k), psn)) {
        return k;
    }
    if (k + 1 >= q->m_done && k + 1 < q->m_tail && back_of(msg_at(q, k + 1), psn)) {
        return q->cur = k + 1;
    }
    for (k = q->m_done; k < q->m_tail; k++) { /* after a rewind */
        if (back_of(msg_at(q, k), psn)) {
            return q->cur = k;
        }
    }
    return q->m_done; /* not reached: the caller asks only for PSNs cut and not acknowledged */
}

/* RoceQueuePair._current_timeout */
static double current_timeout(const struct mrc_roce_qp *q) {
    double t = q->ack_timeout_s * (double)(1ull << (q->backoff < 62 ? q->backoff : 62));
    return t < q->max_ack_timeout_s ? t : q->max_ack_timeout_s;
}

/* the data packet at PSN psn into f; returns its length */
static uint32_t build(struct mrc_roce_qp *q, uint8_t *f, uint32_t psn, uint32_t idx,
                      uint32_t *payload) {
    struct mrc_roce_msg *m = msg_at(q, mrc_roce_msg_of(q, psn));
    uint64_t off64 = (m->cut - back_of(m, psn)) * (uint64_t)q->mtu;
    uint32_t off = off64 < m->length ? (uint32_t)off64 : m->length; /* (always: off64 < length,
                                                                      * or 0 for an empty write) */
    uint32_t n = m->length - off < q->mtu ? m->length - off : q->mtu;
    int first = off == 0, last = off + n >= m->length;
    uint32_t op;
    if (first && last) {
        op = m->has_imm ? MRC_WIRE_OP_RC_WRITE_ONLY_IMM : MRC_WIRE_OP_RC_WRITE_ONLY;
    } else if (first) {
        op = MRC_WIRE_OP_RC_WRITE_FIRST;
    } else if (last) {
        op = m->has_imm ? MRC_WIRE_OP_RC_WRITE_LAST_IMM : MRC_WIRE_OP_RC_WRITE_LAST;
    } else {
        op = MRC_WIRE_OP_RC_WRITE_MIDDLE;
    }
    int ackreq = is_last(op) || idx + 1 >= q->window_psns;
    uint8_t *b = f + OFF_BTH;
    put_bth(b, op, q->peer_qpn, ackreq ? 0x80000000u | psn : psn);
    uint32_t hdr = BTH;
    if (is_reth(op)) {
        put64(b + hdr, m->va);
        put32(b + hdr + 8, m->rkey);
        put32(b + hdr + 12, m->length);
        hdr += RETH;
    }
    if (is_imm(op)) {
        put32(b + hdr, m->imm);
        hdr += IMM;
    }
    if (n) { /* (a zero-length write has no buffer) */
        memcpy(b + hdr, m->buf + off, n);
    }
    *payload = n;
    return finish(q, f, OFF_BTH + hdr + n + ICRC, q->data_w0);
}

int mrc_roce_send(struct mrc_roce_qp *q, double now_s, double rate_bps,
                  struct mrc_txe_out *out) {
    q->pace_blocked = 0;
    if (q->dead) {
        return MRC_TXE_SENT;
    }
    for (;;) {
        uint32_t idx = (q->snd_nxt - q->snd_una) & MASK;
        if (idx >= q->window_psns) {
            break;
        }
        if (q->snd_nxt == q->seg_psn && !cut(q)) {
            break;
        }
        if (q->next_tx_s > now_s) {
            q->pace_blocked = 1;
            break;
        }
        int room = mrc_txe_out_room(out);
        if (room != MRC_TXE_SENT) {
            return room;
        }
        uint32_t psn = q->snd_nxt, n = 0;
        uint32_t len = build(q, mrc_txe_out_frame(out, q->plane), psn, idx, &n);
        mrc_txe_out_commit(out, q->plane, len);
        if (q->port_down) {
            q->st.tx_on_down_port++;
        }
        if (psn == q->snd_max) {
            q->snd_max = (psn + 1) & MASK;
            q->st.tx_data_packets++;
            q->st.tx_data_bytes += n;
        } else {
            q->st.retransmissions++;
        }
        q->snd_nxt = (psn + 1) & MASK;
        if (!q->deadline_armed) {
            q->deadline_armed = 1;
            q->deadline_s = now_s + current_timeout(q);
        }
        /* pace at the current rate: a token bucket one packet (or pace_burst_s) deep */
        double tx_s = (double)(len * 8) / rate_bps;
        double lag = tx_s > q->pace_burst_s ? tx_s : q->pace_burst_s;
        double nxt = q->next_tx_s;
        if (nxt < now_s - lag) {
            nxt = now_s - lag;
        }
        q->next_tx_s = nxt + tx_s;
        q->sent_bytes += len;
    }
    return MRC_TXE_SENT;
}

int mrc_roce_ack_to(struct mrc_roce_qp *q, uint32_t psn, double now_s, int positive) {
    uint32_t una = q->snd_una;
    uint32_t n = ((psn - una) & MASK) + 1;
    if (n > ((q->snd_max - una) & MASK)) {
        return 0;
    }
    una = q->snd_una = (psn + 1) & MASK;
    if (((q->snd_nxt - una) & MASK) >= HALF) {
        q->snd_nxt = una; /* acknowledged beyond a rewind point */
    }
    q->backoff = 0;
    if (positive || !q->nak_retries) {
        q->retries = 0;
    }
    q->nak_rewound = -1;
    q->deadline_armed = una != q->snd_max;
    q->deadline_s = q->deadline_armed ? now_s + q->ack_timeout_s : 0.0;
    while (q->m_done < q->m_tail) {
        struct mrc_roce_msg *m = msg_at(q, q->m_done);
        uint32_t past = (una - m->last_psn) & MASK;
        if (!m->has_last || past == 0 || past >= HALF) {
            break;
        }
        q->m_done++;
        q->retries = 0; /* a completed write is progress */
        q->st.completions++;
        q->last_ack_s = now_s;
    }
    if (q->cur < q->m_done) {
        q->cur = q->m_done;
    }
    return 1;
}

/* --- the responder ----------------------------------------------------------------------- */

static void event(struct mrc_roce_qp *q, int32_t kind, uint32_t a, uint32_t b, uint32_t c,
                  double t_s) {
    struct mrc_roce_event *e = &q->events[q->n_events++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->a = a;
    e->b = b;
    e->c = c;
    e->t_s = t_s;
}

/* RoceQueuePair._refuse: NAK it, write nothing, and fail (the shell's _fatal) */
static void refuse(struct mrc_roce_qp *q, uint32_t syndrome, uint32_t psn, uint32_t why,
                   uint32_t status, uint32_t rkey, uint64_t va, uint32_t length, double now_s,
                   struct mrc_rxe_out *out) {
    q->st.rx_refused++;
    send_ack(q, syndrome, psn, out);
    event(q, MRC_ROCE_EV_REFUSED, syndrome, psn, why, now_s);
    struct mrc_roce_event *e = &q->events[q->n_events - 1];
    e->d = status;
    e->rkey = rkey;
    e->va = va;
    e->length = length;
    q->dead = 1;
}

/* MemoryTable.check (1 bad R_Key, 2 no permission, 3 out of bounds, 0 OK) */
static uint32_t check(struct mrc_rxe_regions *mem, uint32_t rkey, uint64_t va, uint64_t len) {
    struct mrc_rxe_region *r = mrc_rxe_find_region(mem, rkey);
    if (r == NULL) {
        return 1;
    }
    if (!r->remote_write) {
        return 2;
    }
    if (va < r->base_va || va - r->base_va > r->length || len > r->length - (va - r->base_va)) {
        return 3;
    }
    return 0;
}

/* RoceQueuePair._rx_data from its length check on */
static void rx_data(struct mrc_roce_qp *q, struct mrc_rxe_regions *mem, const uint8_t *f,
                    uint32_t end, uint32_t op, uint32_t w2, double now_s,
                    struct mrc_rxe_out *out) {
    uint32_t hdr = BTH + (is_reth(op) ? RETH : 0) + (is_imm(op) ? IMM : 0);
    if (end < OFF_BTH + hdr + ICRC) {
        q->st.rx_malformed++;
        return;
    }
    q->st.rx_data_packets++;
    if (((f[MRC_WIRE_OFF_TC_LO] & MRC_WIRE_TC_LO_ECN_MASK) >> 4) == MRC_WIRE_ECN_CE) {
        q->st.rx_ecn_marked++;
        if (q->dcqcn) {
            maybe_cnp(q, now_s, out);
        }
    }
    uint32_t psn = w2 & MASK;
    uint32_t d = (psn - q->epsn) & MASK;
    if (d) {
        if (d >= HALF) { /* duplicate: re-ACK so a lost ACK is repaired */
            q->st.rx_duplicates++;
            send_ack(q, MRC_ROCE_SYN_ACK, (q->epsn - 1) & MASK, out);
        } else { /* a gap: one NAK, then silence until the expected PSN arrives */
            q->st.rx_out_of_order++;
            if (!q->nak_outstanding) {
                q->nak_outstanding = 1;
                send_ack(q, MRC_ROCE_SYN_NAK_PSN_SEQ, q->epsn, out);
            }
        }
        return;
    }
    int first = is_reth(op), last = is_last(op);
    if (first == q->rx_in_msg) {
        refuse(q, MRC_ROCE_SYN_NAK_INVALID_REQUEST, psn, MRC_ROCE_WHY_SEQUENCE, 0, 0, 0, 0, now_s,
               out);
        return;
    }
    uint32_t off = OFF_BTH + BTH;
    if (first) {
        uint64_t va = be64(f + off);
        uint32_t rkey = be32(f + off + 8), length = be32(f + off + 12);
        off += RETH;
        uint32_t status = check(mem, rkey, va, length);
        if (status) {
            refuse(q, MRC_ROCE_SYN_NAK_REMOTE_ACCESS, psn, MRC_ROCE_WHY_ACCESS, status, rkey, va,
                   length, now_s, out);
            return;
        }
        q->rx_va = va;
        q->rx_rkey = rkey;
        q->rx_len = length;
        q->rx_got = 0;
    }
    uint32_t imm = 0;
    if (is_imm(op)) {
        imm = be32(f + off);
        off += IMM;
    }
    uint32_t plen = end - ICRC - off;
    uint64_t got = (uint64_t)q->rx_got + plen;
    if (got > q->rx_len || (last && got != q->rx_len)) {
        refuse(q, MRC_ROCE_SYN_NAK_INVALID_REQUEST, psn, MRC_ROCE_WHY_LENGTH, 0, 0, 0, 0, now_s,
               out);
        return;
    }
    if (plen) {
        uint64_t va = q->rx_va + q->rx_got;
        uint32_t status = check(mem, q->rx_rkey, va, plen);
        if (status) { /* e.g. deregistered in the middle of a message */
            refuse(q, MRC_ROCE_SYN_NAK_REMOTE_ACCESS, psn, MRC_ROCE_WHY_PLACE, status, 0, 0, 0,
                   now_s, out);
            return;
        }
        struct mrc_rxe_region *r = mrc_rxe_find_region(mem, q->rx_rkey);
        memcpy(r->ptr + (va - r->base_va), f + off, plen);
        r->bytes_placed += plen;
    }
    q->rx_got = (uint32_t)got;
    q->st.rx_placed_bytes += plen;
    q->epsn = (psn + 1) & MASK;
    q->nak_outstanding = 0;
    q->unacked++;
    if (last) {
        q->rx_in_msg = 0;
        q->rx_msn = (q->rx_msn + 1) & MASK;
        if (is_imm(op)) { /* in-order delivery: immediates complete in order */
            event(q, MRC_ROCE_EV_IMM, imm, q->rx_len, q->rx_rqmsn, now_s);
            q->rx_rqmsn = (uint16_t)(q->rx_rqmsn + 1);
        }
    } else {
        q->rx_in_msg = 1;
    }
    if ((w2 & 0x80000000u) || q->unacked >= q->ack_every) {
        send_ack(q, MRC_ROCE_SYN_ACK, psn, out);
    } else if (!q->ack_armed) {
        q->ack_armed = 1;
        q->ack_deadline_s = now_s + q->ack_delay_s;
    }
}

/* roce_icrc.icrc_ok: over the final form of the frame's destination address */
static int icrc_ok(const uint8_t *f, uint32_t end) {
    uint8_t fin[16];
    mrc_usid_final(f + MRC_WIRE_OFF_DST, LBLEN, fin);
    return icrc_of(f, end - ICRC, fin) == le32(f + end - ICRC);
}

int mrc_roce_frame(struct mrc_roce_qp *q, struct mrc_rxe_regions *mem, const uint8_t *f,
                   uint32_t n, double now_s, struct mrc_rxe_out *out) {
    if (q->dead) {
        return 1; /* as the twin, whose QP is in ERROR: nothing happens */
    }
    if (out->n + 2 > out->cap || q->n_events >= MRC_ROCE_MAX_EVENTS) {
        return -1;
    }
    if (n < OFF_BTH + BTH + ICRC) {
        q->st.rx_malformed++;
        return 1;
    }
    uint32_t w0 = be32(f + OFF_IP);
    uint32_t end = OFF_UDP + be16(f + MRC_WIRE_OFF_PAYLOAD_LENGTH);
    if (be16(f + MRC_WIRE_OFF_ETHERTYPE) != MRC_WIRE_ETHERTYPE_IPV6 || w0 >> 28 != 6 ||
        f[MRC_WIRE_OFF_NEXT_HEADER] != MRC_WIRE_IPPROTO_UDP || end > n ||
        end - OFF_UDP < MRC_WIRE_UDP_SIZE + BTH + ICRC || !icrc_ok(f, end) ||
        (be32(f + OFF_BTH + 4) & MASK) != q->qpn) {
        q->st.rx_malformed++; /* also a trimmed frame: a trimmed RC packet has no ICRC */
        return 1;
    }
    uint32_t op = f[OFF_BTH], w2 = be32(f + OFF_BTH + 8);
    if (op >= MRC_WIRE_OP_RC_WRITE_FIRST && op <= MRC_WIRE_OP_RC_WRITE_ONLY_IMM) {
        rx_data(q, mem, f, end, op, w2, now_s, out);
        return 1;
    }
    if (op == MRC_WIRE_OP_RC_ACK && end - OFF_BTH == ACK_LEN &&
        (f[OFF_BTH + BTH] & 0xE0) == MRC_ROCE_SYN_ACK) {
        q->st.rx_acks++;
        if (!mrc_roce_ack_to(q, w2 & MASK, now_s, 1)) {
            q->st.rx_stale++;
        }
        return 1;
    }
    return 0; /* NAKs, CNPs, the rest: Python's */
}
