#ifndef MRC_NSCC_H
#define MRC_NSCC_H
#include <stdint.h>
/* UET 1.0 NSCC in C: the congestion control the send engine (mrc_txe.c) runs per
 * acknowledgment, trim, timeout and receiver penalty when a QP's algorithm is the built-in
 * "uet-1.0-nscc" (docs/design/core.md). Its twin is mrcnic/transport/cc.py's UetNscc: the
 * same operations in the same order on doubles, so for the same inputs both hold the same
 * state to the bit (tests/unit/test_nscc_c.py). The shell fills the parameters from the
 * resolved NsccParams and copies the state both ways (mrcnic/transport/nscc_c.py); nothing
 * here allocates. */

enum { MRC_NSCC_MAX_PLANES = 16 };

struct mrc_nscc_params {
    double mtu, line_Bps, configured_base_rtt_s, min_cwnd, alpha, fi, fi_scale, eta, gamma;
    double keep_min, qa_gate_div, qa_threshold_s, adj_bytes, adj_period_s, delay_alpha;
    double fast_delay_s, half_window_s, plain_target_s;
    /* UetNscc's module constants of the plane-aware mode */
    double plane_slow_gain, plane_engage_targets, plane_release_targets, plane_target_scale;
    double plane_review_rtts;
    uint8_t qa, delay_md, max_cwnd_fixed;
};

struct mrc_nscc {
    struct mrc_nscc_params p;
    /* UetNscc's attributes (the names without their leading underscore) */
    double cwnd_bytes, base_rtt_s, target_delay_s, max_cwnd, avg_delay_s, delay_s, inc;
    double last_adjust_s, last_dec_s, win_end_s, win_min_delay, to_ignore, ignored;
    double rtt_min_cur, rtt_min_prev, rtt_epoch_end_s, dec_extra_s;
    int64_t received, achieved, fi_count;
    int64_t fast_increases, ecn_decreases, delay_decreases, quick_adapts, trims, timeouts;
    int64_t penalty_cuts, plane_engagements;
    uint8_t fast, trigger_qa, standing_queue, has_win_end, has_epoch_end;
    /* the plane-aware mode (_PlaneDelays; planes_on = 0: UetNscc._planes is None) */
    uint8_t planes_on, engaged;
    uint32_t n_planes, slowest;
    double window, ratio, review_s;
    double last_s[16], slow_s[16], seen_s[16];
    /* counts every input, so the shell copies the state out only when it moved */
    uint64_t gen;
};

/* UetNscc.on_ack: acked bytes, the RTT sample (has_rtt = 0: None), the CE echo, the plane of
 * the EV that triggered the SACK (-1: none). */
void mrc_nscc_on_ack(struct mrc_nscc *n, int64_t acked, int has_rtt, double rtt_s, int ecn,
                     int32_t plane, double now_s);
void mrc_nscc_on_trim(struct mrc_nscc *n, int last_hop, double now_s);
void mrc_nscc_on_timeout(struct mrc_nscc *n, double now_s);
void mrc_nscc_on_rcv_penalty(struct mrc_nscc *n, int64_t penalty, double now_s);

#endif
