#ifndef MRC_RXE_H
#define MRC_RXE_H
#include <stdint.h>
/* The receive engine: an MRC responder's data path in C (make bench-nic, docs/design/core.md).
 *
 * For each data frame of a connected QP: the acceptance rules (the peer's source address,
 * headers, ICRC, QP number, PSN window, MSN window, R_Key/permission/bounds), placement into
 * registered memory, the PSN bitmap, CE accounting, message completion in MSN order, and the
 * SACK or NACK the coalescing rule asks for, built from per-EV templates into an output
 * array. Python decides everything else (control frames, timers, errors) and is called per
 * batch. Its twin is the Python responder (mrcnic/transport/responder.py with
 * mrcnic/transport/sack.py ResponderWindow): for the same frames both produce the same
 * control frames, events and counters (tests/unit/test_rx_engine.py).
 *
 * The caller owns every struct and array; nothing here allocates. */

struct mrc_psnwin;
struct mrc_txe_qp;
struct mrc_roce_qp;

/* One registered memory region: the placement rule of mrcnic.transport.memory. */
struct mrc_rxe_region {
    uint32_t rkey;
    uint32_t remote_write; /* 1 when the region's access includes REMOTE_WRITE */
    uint64_t base_va;
    uint64_t length;
    uint8_t *ptr;
    uint64_t bytes_placed; /* counted here; the shell adds it to the Python region */
};

struct mrc_rxe_regions {
    struct mrc_rxe_region *r;
    uint32_t n;
    uint32_t cap;
};

/* The region of R_Key rkey, or NULL. */
struct mrc_rxe_region *mrc_rxe_find_region(struct mrc_rxe_regions *mem, uint32_t rkey);

/* A control-frame template of one reverse EV: Ethernet + IPv6 + UDP headers (payload
 * length, UDP length and checksum zero; DSCP CONTROL, ECT0) and the UDP pseudo-header sum
 * over the source and final destination address plus next header, modulo 0xFFFF. */
struct mrc_rxe_tmpl {
    uint8_t hdr[62];
    uint32_t ev;
    uint32_t psum;
};

/* Control frames out: slot i of cap frames of slot_len bytes each; plane[i] is the port. */
struct mrc_rxe_out {
    uint8_t *buf;
    uint32_t slot_len;
    uint32_t cap;
    uint32_t n;
    uint32_t *len;
    uint8_t *plane;
};

enum {
    MRC_RXE_EV_IMM = 1,        /* a = imm, b = length, c = rqmsn: ImmReceived */
    MRC_RXE_EV_WIMM_FATAL = 2, /* a = write-with-imm messages in flight: REMOTE_OP_ERROR */
    MRC_RXE_EV_REFUSED = 3,    /* a = PSN, b = R_Key, c = PlaceStatus: REMOTE_ACCESS_ERROR */
    MRC_RXE_MAX_EVENTS = 64, /* per QP between two flushes (the shell drains them when full) */
    MRC_RXE_MAX_SRCS = 16,
    MRC_RXE_MAX_REVERSE = 128,
    MRC_RXE_CE_EVS = 4096,
    MRC_RXE_MSN_WINDOW = 16384,
    MRC_RXE_WANT_MSGS = 1, /* a message msg_cap or more ahead of rx_msn (within the window) */
    MRC_RXE_WANT_CE = 2    /* a CE mark with ce_cap EVs already marking */
};

struct mrc_rxe_event {
    int32_t kind;
    uint32_t a;
    uint32_t b;
    uint32_t c;
    double t_s;
};

/* Per-message state, indexed by msn % msg_cap (live MSNs are within msg_cap of rx_msn). */
struct mrc_rxe_msg {
    uint32_t bytes;  /* placed so far (0: none, or complete) */
    uint32_t imm;
    uint32_t length; /* of a completed message waiting for an earlier one */
    uint16_t rqmsn;
    uint8_t has_imm; /* its last packet carried an immediate (placed) */
    uint8_t done;    /* complete, waiting for earlier messages */
};

struct mrc_rxe_ce {
    uint32_t ev;
    uint32_t run;
};

struct mrc_rxe_stats {
    int64_t rx_data_packets, rx_ecn_marked, rx_malformed, rx_trimmed, rx_duplicates;
    int64_t rx_msn_out_of_range, rx_refused, rx_placed_bytes, rx_foreign;
    int64_t tx_sacks, tx_nacks;
    /* every data frame's fate, named (mrcnic QpStats): refusals by cause, and the rest */
    int64_t rx_bad_rkey, rx_no_permission, rx_out_of_bounds, rx_psn_out_of_window;
    int64_t rx_placed_packets, rx_closed;
};

struct mrc_rxe_qp {
    /* set by the shell at connect */
    uint32_t qpn, peer_qpn, planes, reverse_per_plane;
    uint32_t ack_every, max_wimm_inflight;
    uint32_t mtu;                  /* payload bytes per packet, the same at both ends */
    double ack_delay_s;
    uint32_t n_srcs;
    uint8_t srcs[16][16];          /* the peer's source address per plane */
    struct mrc_psnwin *win;        /* the tracking window (mrcnic.fast.PsnWindow's struct) */
    struct mrc_rxe_msg *msgs;      /* msg_cap entries */
    struct mrc_rxe_ce *ce;         /* ce_cap entries */
    uint32_t msg_cap;              /* a power of two, <= MRC_RXE_MSN_WINDOW */
    uint32_t ce_cap;               /* <= MRC_RXE_CE_EVS */
    uint8_t want;                  /* MRC_RXE_WANT_*: a frame needs bigger tables (-1) */
    uint8_t deliver_pending;       /* completed messages wait for room in events[] */
    double deliver_t_s;            /* when they completed (their events' time) */
    struct mrc_rxe_tmpl *tmpl;     /* n_reverse templates, in reverse-EV order */
    uint32_t n_reverse;
    uint8_t reverse_bad[128];      /* per reverse EV: its probes went unanswered */
    uint8_t plane_down[16];
    /* the coalescing state (ResponderWindow) */
    uint32_t pending;
    int64_t pending_lo;            /* -1: none */
    uint8_t ece_pending;
    uint8_t dead;                  /* a fatal error was reported: take no more frames */
    uint8_t sacked;                /* a SACK was sent since the shell last cleared this */
    uint8_t ack_armed;             /* ack_deadline_s is set */
    uint64_t received_bytes;
    uint32_t lasthop_trims;
    double lasthop_frac;
    double ack_deadline_s;
    uint32_t trig_psn, trig_ev;    /* the last packet not yet acknowledged */
    uint64_t trig_ts;
    uint8_t trig_ce;
    /* messages */
    uint16_t rx_msn, rx_rqmsn;
    uint32_t n_ce;
    /* reverse-EV round robin (EvTable.next_reverse_ev / reverse_ev_on) */
    uint32_t reverse_next;
    uint32_t reverse_k[16];
    /* events for the shell */
    uint32_t n_events;
    struct mrc_rxe_event events[64];
    struct mrc_rxe_stats st;
};

/* One frame for qp (its destination QP is q->qpn: the shell demultiplexed it). Returns 1
 * when the frame was a data frame and is done with (placed, refused or counted), 0 when it
 * is not a data frame of an acceptable header (the shell's control path takes it), -1 when
 * the output or event array is full, or when its tables are too small for it (q->want set:
 * the shell moves them, mrc_rxe_move); nothing done then: the shell calls again. */
int mrc_rxe_frame(struct mrc_rxe_qp *q, struct mrc_rxe_regions *mem, const uint8_t *frame,
                  uint32_t n, double now_s, struct mrc_rxe_out *out);

/* Deliver the completed messages that waited for room in the events (deliver_pending), at
 * the time they completed. Returns 1 while some still wait (drain the events, call again). */
int mrc_rxe_resume(struct mrc_rxe_qp *q);

/* The delayed-ACK timer: when due, the SACK for the last unacknowledged packet (if any is
 * pending). Returns 1 if a SACK was queued, 0 if not, -1 when out is full. */
int mrc_rxe_ack_timer(struct mrc_rxe_qp *q, double now_s, struct mrc_rxe_out *out);

/* An acknowledgment now, outside the coalescing rule: the answer to an EV probe (op ACK, on
 * `plane`, echoing ev and ts; Python's Responder._send_sack with the cumulative ack as its
 * trigger). Returns 1, or -1 when out is full. */
int mrc_rxe_ack(struct mrc_rxe_qp *q, uint32_t op, uint32_t ev, uint64_t ts, int ce,
                uint32_t plane, struct mrc_rxe_out *out);

/* Where a receive engine's tables move (mrc_rxe_move): bigger when it asks (q->want), back
 * to small at rest; a table that stays passes its pointer and length. */
struct mrc_rxe_mem {
    struct mrc_rxe_msg *msgs;
    uint32_t msg_cap; /* a power of two, <= MRC_RXE_MSN_WINDOW */
    struct mrc_rxe_ce *ce;
    uint32_t ce_cap;  /* 1 .. MRC_RXE_CE_EVS */
};

/* 1 when every message in progress is within msg_cap of rx_msn (a table of that length holds
 * them: mrc_rxe_move would take it), else 0; stops at the first one beyond. */
int mrc_rxe_fits(const struct mrc_rxe_qp *q, uint32_t msg_cap);

/* Move q's tables to `to` (each message's state re-indexed by its MSN) and clear q->want.
 * Returns 0, -EINVAL for a bad length, -ENOSPC when a message in progress or a marking EV
 * does not fit (nothing moved then). */
int mrc_rxe_move(struct mrc_rxe_qp *q, const struct mrc_rxe_mem *to);

enum {
    MRC_RXE_MAX_QPS = 1024, /* QPs a device serves with C engines (struct mrc_rxe_dev) */
    MRC_RXE_QP_SLOTS = 2048 /* its QP-number index: open addressing, at most half full */
};

/* A device's QPs with a C data path, by QP number, and where their control frames go. The
 * shell fills n, qpn, qp and txq, then calls mrc_rxe_dev_index. */
struct mrc_rxe_dev {
    uint32_t n;
    uint32_t qpn[1024];
    struct mrc_rxe_qp *qp[1024];
    struct mrc_txe_qp *txq[1024]; /* the same QP's send engine (its SACKs), or NULL */
    struct mrc_roce_qp *roce[1024]; /* a RoCEv2 QP's engine (qp[i] and txq[i] NULL), or NULL;
                                     * (the simulator's C fabric, mrc_simnet.c, has MRC QPs only) */
    int16_t slot[2048];           /* the index: QP number's slot -> its entry, -1 empty */
    struct mrc_rxe_regions *mem;
    struct mrc_rxe_out *out;
    uint32_t n_rest; /* set by mrc_rxe_dispatch: frames it looked at and did not take */
    uint8_t stopped; /* set by mrc_rxe_dispatch: it stopped after a frame of an engine's QP
                      * that it did not take (the last one it looked at) */
    uint32_t grow;   /* set by mrc_rxe_dispatch: 1 + the entry whose receive engine stopped
                      * it for bigger tables (its q->want), 0 none */
    uint32_t n_touched;     /* set by mrc_rxe_scan: the entries a batch's frames go to, each */
    uint16_t touched[1024]; /* once, in first-seen order: the shell prepares and serves only */
    uint8_t mark[1024];     /* them (mark: listed) */
};

/* Build the QP-number index of d's first n entries (after they changed). */
void mrc_rxe_dev_index(struct mrc_rxe_dev *d);

/* The entry of QP number qpn in d, or -1. */
int32_t mrc_rxe_dev_find(const struct mrc_rxe_dev *d, uint32_t qpn);

/* List in d->touched the entries the frames of a receive batch go to (the arguments as
 * mrc_rxe_dispatch's), the list of the last batch cleared first: the shell prepares those QPs,
 * and only those, before the batch. */
void mrc_rxe_scan(struct mrc_rxe_dev *d, const uint8_t *buf, const uint32_t *offs,
                  const uint32_t *lens, uint32_t n, uint32_t slot_len);

/* A receive batch: frame i at buf + offs[i], lens[i] bytes (a length above slot_len means
 * the kernel cut it). Each frame goes to the QP its BTH names (data frames to its receive
 * engine, SACKs and ACKs to its send engine, mrc_txe_frame; every frame of a RoCEv2 QP to
 * mrc_roce_frame); done[i] = 1 when an engine
 * took it, 0 when the shell's per-frame path must (control frames, QPs without an engine),
 * 2 when it was cut (too big). Returns how many frames were looked at: fewer than n when
 * the output or an event array filled up (the shell drains it and calls again with the
 * rest), or when a frame of a QP with an engine was not taken (d->stopped: the shell takes
 * that frame now, in order, then calls again with the rest). */
int mrc_rxe_dispatch(struct mrc_rxe_dev *d, const uint8_t *buf, const uint32_t *offs,
                     const uint32_t *lens, uint32_t n, uint32_t slot_len, double now_s,
                     int8_t *done);
#endif
