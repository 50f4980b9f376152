#ifndef MRC_TXE_H
#define MRC_TXE_H
#include <stdint.h>

#include "mrc_nscc.h"
/* The send engine: an MRC requester's data path in C (docs/design/core.md, make bench-nic).
 *
 * Per packet: segmenting posted writes, the EV each packet sprays on (EvTable.pick, bag
 * mode, with the same Mersenne Twister draws as Python's random.Random), the data frame
 * built from the EV's template (headers, ICRC, UDP checksum), the scoreboard record, its
 * retransmission timer and the send-order list; retransmissions from the repair queue.
 * Per acknowledgment: the SACK or NACK applied to the scoreboard, per-EV delivery evidence,
 * spurious-retransmission detection, the RTT estimator and RTO, loss detection (RACK's time
 * rule and the per-EV order rule), message completion in order. Per timer: expiries.
 *
 * Python keeps the policy and is called per batch: the feedback array (fb) lists, in the
 * order the Python requester would have made them, the calls it must make (EvTable inputs,
 * congestion-control samples, completions, errors). Its twin is the Python requester
 * (mrcnic/transport/requester.py, sack.py's Scoreboard, ev.py's pick); for the same inputs
 * both produce the same frames, events and counters (tests/unit/test_tx_engine.py).
 *
 * The caller owns every struct and array; nothing here allocates. */

enum {
    /* feedback kinds (struct mrc_txe_fb) */
    /* (ts = bytes in flight where a record says "inflight": the congestion control's view) */
    MRC_TXE_FB_EV = 1,        /* slot, a = input: EvTable.apply(slot, input); for
                                 MRC_TXE_IN_LOST also b = lost bytes, ts = inflight: cc.on_loss */
    MRC_TXE_FB_ACK = 2,       /* slot = the SACK's EV or -1, a = acked bytes, b = ece,
                                 ts = inflight, x = RTT sample or -1: cc.on_ack */
    MRC_TXE_FB_PENALTY = 3,   /* a = penalty: cc.on_rcv_penalty */
    MRC_TXE_FB_COMPLETE = 4,  /* ts = message index: a write completed */
    MRC_TXE_FB_PROBE = 5,     /* slot, ts, b = ecn: EvTable.on_probe_answer */
    MRC_TXE_FB_TRIM = 6,      /* slot, a = bytes, b = last hop, ts = inflight: cc.on_trim,
                                 cc.on_loss */
    MRC_TXE_FB_WINDOW = 7,    /* a = span: the peer's window is smaller than we thought */
    MRC_TXE_FB_NACK_FATAL = 8,/* a = reason, b = psn, ts = message index */
    MRC_TXE_FB_TIMEOUT = 9,   /* slot, a = bytes, ts = inflight: cc.on_timeout, cc.on_loss */
    MRC_TXE_FB_RETRY = 10,    /* a = psn, b = retries, ts = message index: RETRY_EXCEEDED */
    MRC_TXE_FB_DRAIN = 11,    /* the end of one frame's processing: drain EV events */
    /* EvInput codes of MRC_TXE_FB_EV */
    MRC_TXE_IN_ECN_ECHO = 1,
    MRC_TXE_IN_ALWAYS_SKIP = 2,
    MRC_TXE_IN_LOST = 3,
    MRC_TXE_IN_TRIMMED = 4,
    MRC_TXE_IN_TIMEOUT = 5,
    /* mrc_txe_send results */
    MRC_TXE_SENT = 0,      /* nothing more may leave now */
    MRC_TXE_OUT_FULL = 1,  /* the output filled: drain it and call again */
    MRC_TXE_RELEASE = 2,   /* a SKIP rotation ends here: release it (Python) and call again */
    MRC_TXE_NO_EV = 3,     /* no EV to send on */
    MRC_TXE_PORT_FULL = 4, /* a port's queue is full: the pacer must let frames go first */
    MRC_TXE_GROW = 5,      /* rec_cap - 1 PSNs are outstanding and rec_max allows more: move
                              to bigger rings (mrc_txe_move) and call again */
    MRC_TXE_MAX_GROUPS = 16,
    MRC_TXE_MAX_SRCS = 16
};

/* The per-EV-slot frame template: Ethernet + IPv6 + UDP headers (DSCP, ECN, payload length,
 * UDP length and checksum zero) and the UDP pseudo-header sum (source, final destination,
 * next header) modulo 0xFFFF: QueuePair._make_tmpl. */
struct mrc_txe_tmpl {
    uint8_t hdr[62];
    uint32_t psum;
};

/* A posted write (TxMessage), in a ring indexed by its number modulo msg_cap. */
struct mrc_txe_msg {
    const uint8_t *buf;
    uint64_t va;
    uint32_t rkey;
    uint32_t length;
    uint32_t imm;
    uint32_t next_off;
    int64_t last_psn; /* -1 until its last packet is built */
    uint16_t msn;
    uint16_t rqmsn;
    uint8_t has_imm;
};

/* A sent, unacknowledged packet (TxRecord), in a ring indexed by PSN modulo rec_cap. */
struct mrc_txe_rec {
    double sent_s;
    double first_sent_s;
    double to_sent_s;
    uint64_t tx_ts_ns;
    uint64_t to_ts_ns;
    uint64_t timer_seq;
    int64_t recovery; /* its entry in the recovery log, or -1 */
    uint64_t msg;
    uint32_t psn;
    uint32_t offset;
    uint32_t length;
    uint32_t retries;
    uint32_t losses;
    int32_t slot;
    int32_t to_slot;
    uint8_t opcode;
    uint8_t live;
    uint8_t lost;
    uint8_t ever_rtx;
    uint8_t spurious;
    uint8_t lost_by;
};

struct mrc_txe_timer {
    double deadline_s;
    uint64_t seq;
    uint32_t psn;
};

struct mrc_txe_ord {
    uint64_t ts;
    uint32_t psn;
};

struct mrc_txe_fb {
    int32_t kind;
    int32_t slot;
    uint32_t a;
    uint32_t b;
    uint64_t ts;
    double x;
};

struct mrc_txq;

/* Data frames out: frame i at buf + i * slot_len, len[i] bytes, on port plane[i]; or, when
 * ports is set, straight into the queue of the frame's port (ports[plane], n_ports of them:
 * mrc_txq.h), sending stopping as soon as one of them is full. */
struct mrc_txe_out {
    uint8_t *buf;
    uint32_t slot_len;
    uint32_t cap;
    uint32_t n;
    uint32_t *len;
    uint8_t *plane;
    struct mrc_txq *ports;
    uint32_t n_ports;
};

/* Room for one more frame on every port: MRC_TXE_SENT (0), else MRC_TXE_OUT_FULL or
 * MRC_TXE_PORT_FULL. */
int mrc_txe_out_room(const struct mrc_txe_out *out);

/* Where the next frame on `plane` is built (mrc_txe_out_room said there is room). */
uint8_t *mrc_txe_out_frame(struct mrc_txe_out *out, uint32_t plane);

/* The frame built at mrc_txe_out_frame(out, plane), len bytes, joins the output. */
void mrc_txe_out_commit(struct mrc_txe_out *out, uint32_t plane, uint32_t len);

struct mrc_txe_stats {
    int64_t tx_data_packets, tx_data_bytes, retransmissions, rx_sacks, rx_nacks;
    int64_t rx_stale_nacks, sack_losses, spurious_retransmissions, spurious_timeouts;
    int64_t timeouts, completions, rx_malformed, rx_foreign;
    int64_t rx_unmatched_nacks, rx_closed;
};

struct mrc_txe_qp {
    /* set at connect */
    uint32_t qpn, peer_qpn, planes, mtu, nslots, retry_limit, max_wimm_inflight;
    uint32_t window_psns; /* the peer's tracking window (Python may shrink it) */
    double max_rto_s, min_rto_s;
    uint32_t n_srcs;
    uint8_t srcs[16][16];
    struct mrc_txe_tmpl *tmpl; /* per slot */
    const uint32_t *ev_values, *plane_of, *path_of; /* per slot */
    /* EvTable's per-slot and per-path arrays, kept here while the engine runs */
    int64_t *tx_packets, *acked_packets, *timeouts, *trims, *ecn_echoes;
    double *evidence_s, *ev_acked_sent_s; /* per slot */
    double *path_evidence_s, *path_ack_s; /* per path */
    /* spraying: EvTable._groups, _bags, _rr, tx_count, the head of _skip_release, its RNG */
    uint32_t n_groups;
    uint32_t grp_n[16];
    uint32_t bag_n[16];
    /* the groups' turns: rr walks sched[0 .. n_sched), each a group index (EvTable._sched:
     * round robin, or weighted by each plane's entries when shares follow capacity) */
    uint32_t n_sched;
    uint8_t sched[256];
    int32_t *grp; /* group g's slots at grp[g * nslots ...] */
    int32_t *bag;
    uint32_t rr;
    uint8_t pick_resume; /* the pick that stopped for a release: tx_count is counted */
    int64_t tx_count;
    int64_t rel_head; /* tx_count of the next SKIP release, -1 none */
    uint32_t mt[624];
    uint32_t mti;
    /* messages: [m_done, m_seg) segmented, not completed; [m_seg, m_tail) not fully sent */
    struct mrc_txe_msg *msgs;
    uint32_t msg_cap; /* a power of two */
    uint64_t m_done, m_seg, m_tail;
    uint32_t wimm_outstanding;
    /* the scoreboard */
    struct mrc_txe_rec *recs;
    uint32_t rec_cap; /* a power of two: at most rec_cap - 1 PSNs outstanding */
    uint32_t rec_max; /* the rec_cap the shell grows to on MRC_TXE_GROW (<= rec_cap: fixed) */
    uint32_t n_live;
    uint32_t snd_una, snd_nxt;
    int64_t inflight_bytes;
    uint64_t seq;
    struct mrc_txe_timer *fifo;
    uint32_t fifo_cap, fifo_head, fifo_n;
    struct mrc_txe_timer *heap;
    uint32_t heap_cap, heap_n;
    struct mrc_txe_ord *ord;
    uint32_t ord_cap, ord_head, ord_n;
    uint32_t *rtxq;
    uint32_t rtxq_cap, rtxq_head, rtxq_n;
    /* the recovery log: [delay_s, spurious] of each first retransmission after a loss */
    double *recov_delay;
    uint8_t *recov_spur;
    uint32_t recov_cap;
    uint64_t recov_count;
    /* RTT and RTO (Requester._rtt_sample, _update_rto) */
    double srtt, rttvar, min_rtt, rtt_peak, rto, rto_peak, rto_peak_at_s, host_stall_s, host_stall_at_s;
    uint8_t has_srtt, rtt_measured;
    /* loss detection (Requester._find_losses) */
    uint8_t ev_order_ok;
    uint32_t reo_mult, reo_quiet, ev_order_spurious;
    double rack_sent_s;
    uint32_t *work; /* 2 * rec_cap entries of scratch: acknowledged, lost, expired PSNs */
    uint8_t resume_new;      /* a release stopped the new-data loop: go on there */
    uint8_t resume_in_order; /* and whether its timers went to the FIFO */
    /* the congestion control when it runs here (UET NSCC, mrc_nscc.c): its inputs are applied
     * where they arise and the feedback lists no MRC_TXE_FB_ACK; NULL: Python's, per record */
    struct mrc_nscc *cc;
    /* feedback for Python, in order */
    struct mrc_txe_fb *fb;
    uint32_t fb_cap, n_fb;
    uint8_t dead;
    struct mrc_txe_stats st;
};

/* Where a QP's rings move (mrc_txe_move): the shell allocates them, bigger when the engine
 * asks (MRC_TXE_GROW; a post beyond msg_cap; a recovery log about to wrap) and smaller at
 * rest; a ring that stays passes its current pointer and capacity. Every cap is a power of
 * two but heap_cap and fb_cap; work holds 2 * rec_cap. */
struct mrc_txe_mem {
    struct mrc_txe_msg *msgs;
    uint32_t msg_cap;
    struct mrc_txe_rec *recs;
    uint32_t rec_cap;
    uint32_t *work;
    struct mrc_txe_timer *fifo;
    uint32_t fifo_cap;
    struct mrc_txe_timer *heap;
    uint32_t heap_cap;
    struct mrc_txe_ord *ord;
    uint32_t ord_cap;
    uint32_t *rtxq;
    uint32_t rtxq_cap;
    struct mrc_txe_fb *fb;
    uint32_t fb_cap;
    double *recov_delay;
    uint8_t *recov_spur;
    uint32_t recov_cap;
};

/* Move q's rings to `to`: every live entry re-indexed (records by PSN, writes by number, the
 * recovery log's newest entries), the timer, order and repair queues compacted to their live
 * entries as a full ring is (the same functions), pending feedback kept. Returns 0, -EINVAL
 * for a cap that is not a power of two or too small for its partners, -ENOSPC when what is
 * live does not fit (nothing moved then; the queues may be compacted in place, which changes
 * nothing they give). The old arrays are the caller's to free. */
int mrc_txe_move(struct mrc_txe_qp *q, const struct mrc_txe_mem *to);

/* Seed the twister from Python's random.Random.getstate(): 624 words and the index. */
void mrc_txe_mt_load(struct mrc_txe_qp *q, const uint32_t *state, uint32_t index);

/* Everything that may leave now: retransmissions, then new data, while the congestion
 * window (cwnd_bytes; q->cc's own when it runs here) and the peer's window allow
 * (Requester.frames_to_send). Returns one of
 * MRC_TXE_SENT, _OUT_FULL, _RELEASE, _NO_EV. */
int mrc_txe_send(struct mrc_txe_qp *q, double now_s, double cwnd_bytes,
                 struct mrc_txe_out *out);

/* A SACK's fields (Requester._rx_sack). Returns 0, or -1 when the feedback array has too
 * little room (nothing done: the shell flushes and calls again). */
int mrc_txe_sack(struct mrc_txe_qp *q, uint32_t cack_psn, uint32_t offset, uint64_t bitmap,
                 uint32_t ev, uint32_t mark, int ece, uint32_t pen, uint64_t ts_ns,
                 int probe_answer, double now_s);

/* A NACK's fields (Requester._rx_nack). Returns 0 or -1 as mrc_txe_sack. */
int mrc_txe_nack(struct mrc_txe_qp *q, uint32_t reason, uint32_t psn, uint32_t cack_psn,
                 uint64_t ts_ns, double now_s);

/* One received frame: a SACK, ACK or NACK of the exact length is checked (headers, source,
 * ICRC, QP number) and applied. Returns 1 when taken, 0 when not one of those (the shell's
 * control path decodes it), -1 when the feedback array is too full (nothing done). */
int mrc_txe_frame(struct mrc_txe_qp *q, const uint8_t *f, uint32_t n, double now_s);

/* Retransmission timeouts due at now_s (the loop of QueuePair.handle_timer). Returns 0, or
 * -1 when the feedback array is too full (nothing done). */
int mrc_txe_expire(struct mrc_txe_qp *q, double now_s);

/* The earliest live retransmission deadline in *deadline_s: returns 1, or 0 when there is
 * none (Scoreboard.next_deadline). */
int mrc_txe_next_deadline(struct mrc_txe_qp *q, double *deadline_s);

/* A local port went down: every outstanding packet sent on it goes to the repair queue. */
void mrc_txe_port_down(struct mrc_txe_qp *q, uint32_t plane);

/* A fatal error: forget everything outstanding (records, timers, queues, messages). */
void mrc_txe_reset(struct mrc_txe_qp *q);
#endif
