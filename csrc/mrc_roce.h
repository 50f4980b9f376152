#ifndef MRC_ROCE_H
#define MRC_ROCE_H
#include <stdint.h>
/* The RoCEv2 baseline's data path in C (docs/design/rocev2.md, make bench-nic).
 *
 * Per packet, what a RoCEv2 RC QP does as deployed: segmenting posted writes, the data frame
 * (the QP's one path, RC opcodes, RETH/ImmDt, the IBTA ICRC, the UDP checksum), pacing at the
 * rate the shell gives (DCQCN's, decided in Python), go-back-N from snd_nxt after a rewind;
 * the responder's in-order acceptance, placement into registered memory, the coalesced ACK,
 * the one NAK per gap, the CNP on CE (at most one per interval); and the requester's
 * cumulative ACK with the writes it completes; the delayed ACK when its deadline passes, and
 * the QP's next deadline. Python keeps the policy and the rare paths: NAKs and CNPs received,
 * the local ACK timeout, retries and errors, DCQCN (the shell hands it the bytes sent per
 * batch). Its twin is the Python QP
 * (mrcnic/rocev2/qp.py RoceQueuePair); for the same inputs both produce the same frames,
 * events and counters (tests/unit/test_rocev2_engine.py).
 *
 * The caller owns every struct and array; nothing here allocates. */

struct mrc_rxe_regions;
struct mrc_rxe_out;
struct mrc_txe_out;

enum {
    /* mrcnic.wire.rocev2's facts (tests/unit/test_wire_facts.py holds them to it) */
    MRC_ROCE_OP_CNP = 0x81,
    MRC_ROCE_CNP_RESERVED_SIZE = 16,
    MRC_ROCE_SYN_ACK = 0x00,
    MRC_ROCE_SYN_NAK_PSN_SEQ = 0x60,
    MRC_ROCE_SYN_NAK_INVALID_REQUEST = 0x61,
    MRC_ROCE_SYN_NAK_REMOTE_ACCESS = 0x62,
    MRC_ROCE_EV_IMM = 1,     /* a = imm, b = length, c = rqmsn: ImmReceived */
    MRC_ROCE_EV_REFUSED = 2, /* a = NAK syndrome, b = PSN, c = why, d = PlaceStatus,
                                rkey, va, length: the responder refused a request (fatal) */
    MRC_ROCE_WHY_SEQUENCE = 1, /* opcode out of sequence */
    MRC_ROCE_WHY_ACCESS = 2,   /* the RETH's write refused */
    MRC_ROCE_WHY_LENGTH = 3,   /* payload does not match the RETH length */
    MRC_ROCE_WHY_PLACE = 4,    /* placement refused */
    MRC_ROCE_MAX_EVENTS = 64
};

/* A posted write, in a ring indexed by its number modulo msg_cap. */
struct mrc_roce_msg {
    const uint8_t *buf;
    uint64_t va;
    uint32_t rkey;
    uint32_t length;
    uint32_t imm;
    uint32_t next_off;  /* bytes segmented */
    uint64_t cut;       /* packets cut (a write may have more than the PSN space holds) */
    uint32_t end_psn;   /* the PSN after its last packet cut */
    uint32_t last_psn;  /* set when its last packet is cut (has_last) */
    uint8_t has_imm;
    uint8_t has_last;
};

struct mrc_roce_event {
    int32_t kind;
    uint32_t a, b, c, d, rkey, length;
    uint64_t va;
    double t_s;
};

/* Named as the RoceStats fields they add to (the shell folds them per batch). */
struct mrc_roce_stats {
    int64_t tx_data_packets, tx_data_bytes, retransmissions, tx_on_down_port;
    int64_t rx_data_packets, rx_ecn_marked, rx_duplicates, rx_out_of_order, rx_placed_bytes;
    int64_t rx_malformed, rx_refused, tx_acks, tx_nacks, tx_cnps, cnps_suppressed;
    int64_t rx_acks, rx_stale, completions;
};

struct mrc_roce_qp {
    /* set at connect */
    uint32_t qpn, peer_qpn, mtu, plane, window_psns, ack_every;
    uint8_t hdr[62];           /* Ethernet + IPv6 + UDP: word 0 with the flow label only,
                                * lengths and checksum zero */
    uint8_t src[16], final[16]; /* the source and final destination (ICRC, UDP checksum) */
    uint32_t data_w0, ctrl_w0; /* IPv6 word 0 of data (DSCP, ECT0) and control frames */
    uint8_t nak_retries, dcqcn;
    double ack_timeout_s, max_ack_timeout_s, ack_delay_s, cnp_interval_s;
    /* requester: [m_done, m_tail) posted and not completed, [m_seg, m_tail) not all cut */
    struct mrc_roce_msg *msgs;
    uint32_t msg_cap; /* a power of two */
    uint64_t m_done, m_seg, m_tail;
    uint64_t cur;     /* the message of the last packet built (where the next one is sought) */
    uint32_t snd_una, snd_nxt, snd_max, seg_psn; /* seg_psn: the next PSN to cut */
    uint32_t retries, backoff;
    int64_t nak_rewound; /* the PSN of the last NAK rewind, -1 none */
    uint8_t deadline_armed, pace_blocked, port_down, dead;
    double deadline_s, next_tx_s;
    double pace_burst_s; /* how far the pacing may lag the clock (RoceQueuePair.pace_burst_s) */
    uint64_t sent_bytes; /* frame bytes sent since the shell last took them (DCQCN) */
    double last_ack_s;   /* when the last completion-bearing ACK came */
    /* responder */
    uint32_t epsn, rx_rkey, rx_len, rx_got, rx_msn, unacked;
    uint64_t rx_va;
    uint16_t rx_rqmsn;
    uint8_t nak_outstanding, rx_in_msg, ack_armed;
    double ack_deadline_s, last_cnp_s;
    /* events for the shell */
    uint32_t n_events;
    struct mrc_roce_event events[64];
    struct mrc_roce_stats st;
};

/* Data frames while the window and the pacing at rate_bps allow (RoceQueuePair's
 * frames_to_send after its control frames). Returns MRC_TXE_SENT, MRC_TXE_OUT_FULL (drain
 * and call again) or MRC_TXE_PORT_FULL (the pacer lets frames go first). */
int mrc_roce_send(struct mrc_roce_qp *q, double now_s, double rate_bps,
                  struct mrc_txe_out *out);

/* One frame for q (its BTH names q->qpn). Returns 1 when taken (a data frame, a positive
 * ACK, or a frame counted malformed), 0 when Python's path must take it (NAKs, CNPs, other
 * opcodes), -1 when out or the event array has no room (nothing done). */
int mrc_roce_frame(struct mrc_roce_qp *q, struct mrc_rxe_regions *mem, const uint8_t *f,
                   uint32_t n, double now_s, struct mrc_rxe_out *out);

/* RoceQueuePair.get_timer of a READY QP: the earliest of the ACK timeout, the delayed ACK and
 * the pacing (next_tx_s + pace_burst_s while pace_blocked). Returns 0 when none is armed, else 1
 * with the time in *at. */
int mrc_roce_next_timer(const struct mrc_roce_qp *q, double *at);

/* The delayed ACK's deadline (RoceQueuePair.handle_timer's first clause): when it has passed,
 * disarm it and acknowledge what arrived since the last ACK. Returns 1 when an ACK went into
 * out, 0 when none was due, -1 when out has no room (drain it and call again). */
int mrc_roce_ack_timer(struct mrc_roce_qp *q, double now_s, struct mrc_rxe_out *out);

/* Cumulative acknowledgment of every PSN up to psn (RoceQueuePair._ack_to): returns 0 when it
 * acknowledges nothing new, else 1. positive 0: a NAK's implicit acknowledgment. */
int mrc_roce_ack_to(struct mrc_roce_qp *q, uint32_t psn, double now_s, int positive);

/* The index of the message holding PSN psn, which must be cut and not acknowledged. */
uint64_t mrc_roce_msg_of(struct mrc_roce_qp *q, uint32_t psn);
#endif
