/* UET 1.0 NSCC: mrcnic/transport/cc.py's UetNscc, method for method (mrc_nscc.h). Every
 * expression keeps the twin's order of operations (-ffp-contract=off: no fused multiply-add),
 * so both round alike. */
#include "mrc_nscc.h"

#include <math.h>

static void clamp(struct mrc_nscc *n) {
    double c = n->cwnd_bytes;
    if (c > n->max_cwnd) {
        n->cwnd_bytes = n->max_cwnd;
    } else if (c < n->p.min_cwnd) {
        n->cwnd_bytes = n->p.min_cwnd;
    }
}

/* _sample_rtt: the base RTT is the minimum of two half-window buckets */
static void sample_rtt(struct mrc_nscc *n, double rtt, double now) {
    if (!n->has_epoch_end || now >= n->rtt_epoch_end_s) {
        if (n->has_epoch_end) {
            n->rtt_min_prev = n->rtt_min_cur;
            n->rtt_min_cur = INFINITY;
        }
        n->rtt_epoch_end_s = now + n->p.half_window_s;
        n->has_epoch_end = 1;
    }
    if (rtt < n->rtt_min_cur) {
        n->rtt_min_cur = rtt;
    }
    double prev = n->rtt_min_prev, cur = n->rtt_min_cur;
    double base = cur < prev ? cur : prev;
    if (base != n->base_rtt_s) {
        n->base_rtt_s = base;
        if (!n->p.max_cwnd_fixed) {
            double ref = base > n->p.configured_base_rtt_s ? base : n->p.configured_base_rtt_s;
            double m = 1.5 * n->p.line_Bps * ref;
            n->max_cwnd = n->p.min_cwnd > m ? n->p.min_cwnd : m;
        }
    }
}

/* _filter */
static void filter(struct mrc_nscc *n, double delay, int ecn) {
    if (!ecn && delay > n->target_delay_s) {
        delay = 0.25 * n->base_rtt_s;
    }
    n->avg_delay_s += n->p.delay_alpha * (delay - n->avg_delay_s);
}

/* _fast_increase */
static int fast_increase(struct mrc_nscc *n, int64_t acked, double delay) {
    if (delay < n->p.fast_delay_s) {
        n->fi_count += acked;
        if (n->fast || (double)n->fi_count > n->cwnd_bytes) {
            n->cwnd_bytes += (double)acked * n->p.fi_scale;
            n->fast = 1;
            n->fast_increases++;
            return 1;
        }
    } else {
        n->fi_count = 0;
    }
    n->fast = 0;
    return 0;
}

/* _md: multiplicative decrease, at most once per base RTT (+ the slowest plane's queue) */
static void md(struct mrc_nscc *n, double delay, double now, int ecn) {
    n->fast = 0;
    n->fi_count = 0;
    double target = n->target_delay_s;
    if (delay <= target || now - n->last_dec_s <= n->base_rtt_s + n->dec_extra_s) {
        return;
    }
    double keep = 1.0 - n->p.gamma * (delay - target) / delay;
    n->cwnd_bytes *= keep > n->p.keep_min ? keep : n->p.keep_min;
    n->last_dec_s = now;
    if (ecn) {
        n->ecn_decreases++;
    } else {
        n->delay_decreases++;
    }
    clamp(n);
}

/* _window: the quick-adapt window; 1 when this feedback is consumed here */
static int window(struct mrc_nscc *n, int loss, int ecn, double delay, double now) {
    int done = 0;
    if (n->p.qa && ecn && n->ignored < n->to_ignore) {
        done = 1;
    } else if (!n->has_win_end || now > n->win_end_s) {
        if (n->has_win_end) {
            double lowest = n->win_min_delay;
            if (lowest != INFINITY) {
                n->standing_queue = lowest > n->target_delay_s;
            }
            if (n->p.qa && (n->trigger_qa || loss || delay > n->p.qa_threshold_s) &&
                (double)n->achieved < n->max_cwnd / n->p.qa_gate_div) {
                n->to_ignore = n->cwnd_bytes;
                n->ignored = 0.0;
                double a = (double)n->achieved;
                n->cwnd_bytes = n->p.min_cwnd > a ? n->p.min_cwnd : a;
                n->trigger_qa = 0;
                n->quick_adapts++;
                n->last_dec_s = now;
                done = 1;
            } else if (n->p.delay_md && n->standing_queue) {
                md(n, lowest, now, 0);
            }
        }
        n->achieved = 0;
        n->win_min_delay = INFINITY;
        n->win_end_s = now + n->base_rtt_s + n->target_delay_s;
        n->has_win_end = 1;
    }
    if (done) {
        n->inc = 0.0;
        n->received = 0;
    }
    return done;
}

static void fulfill(struct mrc_nscc *n, double now) {
    n->cwnd_bytes += n->inc / n->cwnd_bytes;
    if (now - n->last_adjust_s >= n->p.adj_period_s) {
        n->cwnd_bytes += n->p.eta;
        n->last_adjust_s = now;
    }
    n->inc = 0.0;
    n->received = 0;
}

/* _react: NSCC's answer to one acknowledgment (has_delay = 0: no RTT sample) */
static void react(struct mrc_nscc *n, int64_t acked, int ecn, int has_delay, double delay,
                  double now) {
    n->received += acked;
    n->achieved += acked;
    n->ignored += (double)acked;
    if (has_delay) {
        filter(n, delay, ecn);
        if (delay < n->win_min_delay) {
            n->win_min_delay = delay;
        }
    } else {
        delay = n->avg_delay_s;
    }
    n->delay_s = delay;
    if (window(n, 0, ecn, delay, now)) {
        return;
    }
    double target = n->target_delay_s;
    if (!ecn) {
        if (delay >= target) {
            n->fast = 0;
            n->fi_count = 0;
            if (!n->standing_queue) {
                n->inc += n->p.fi * (double)acked;
            }
        } else if (!fast_increase(n, acked, delay)) {
            n->inc += n->p.alpha * (double)acked * (target - delay);
        }
    } else if (delay >= target) {
        md(n, n->avg_delay_s, now, 1);
    }
    clamp(n);
    if ((double)n->received > n->p.adj_bytes || now - n->last_adjust_s > n->p.adj_period_s) {
        fulfill(n, now);
        clamp(n);
    }
}

/* -- the plane-aware mode (_review_planes, _plane_delay, _share_out) -- */

static void review_planes(struct mrc_nscc *n, double now) {
    double base = n->base_rtt_s;
    n->review_s = now + n->p.plane_review_rtts * base;
    uint32_t live[16], nl = 0;
    for (uint32_t i = 0; i < n->n_planes && i < 16; i++) {
        double a = 4 * base, b = 2 * (base + n->last_s[i]);
        if (now - n->seen_s[i] <= (a >= b ? a : b)) {
            live[nl++] = i;
        }
    }
    double target = n->p.plain_target_s;
    double gap = 0.0;
    if (nl >= 2) {
        double slow[16];
        for (uint32_t k = 0; k < nl; k++) { /* insertion sort: at most 16 */
            double v = n->slow_s[live[k]];
            uint32_t j = k;
            while (j > 0 && slow[j - 1] > v) {
                slow[j] = slow[j - 1];
                j--;
            }
            slow[j] = v;
        }
        gap = slow[nl - 1] - slow[nl / 2];
    }
    if (!n->engaged) {
        if (gap <= n->p.plane_engage_targets * target) {
            return;
        }
        n->engaged = 1;
        n->plane_engagements++;
        n->target_delay_s = n->p.plane_target_scale * target;
    } else if (gap < n->p.plane_release_targets * target || nl < 2) {
        n->engaged = 0;
        n->ratio = 1.0;
        n->target_delay_s = target;
        n->dec_extra_s = 0.0;
        return;
    }
    uint32_t s = live[0]; /* max(live, key=slow): the first of the largest */
    for (uint32_t k = 1; k < nl; k++) {
        if (n->slow_s[live[k]] > n->slow_s[s]) {
            s = live[k];
        }
    }
    n->slowest = s;
    double q = n->last_s[s];
    double sum = 0.0;
    for (uint32_t k = 0; k < nl; k++) {
        sum += n->last_s[live[k]];
    }
    double mean = sum / (double)nl;
    double r = (base + mean) / (base + q);
    n->ratio = 1.0 < r ? 1.0 : r;
}

static double plane_delay(struct mrc_nscc *n, uint32_t plane, double delay, double now) {
    n->last_s[plane] = delay;
    n->slow_s[plane] += n->p.plane_slow_gain * (delay - n->slow_s[plane]);
    n->seen_s[plane] = now;
    if (now >= n->review_s) {
        review_planes(n, now);
    }
    if (!n->engaged) {
        return delay;
    }
    double q = n->last_s[n->slowest];
    n->dec_extra_s = q;
    return delay > q ? delay : q;
}

static void share_out(struct mrc_nscc *n) {
    n->window = n->cwnd_bytes;
    double c = n->window * n->ratio;
    n->cwnd_bytes = c > n->p.min_cwnd ? c : n->p.min_cwnd;
}

static inline void enter(struct mrc_nscc *n) {
    n->gen++;
    if (n->planes_on && n->engaged) {
        n->cwnd_bytes = n->window;
    }
}

static inline void leave(struct mrc_nscc *n) {
    if (n->planes_on && n->engaged) {
        share_out(n);
    }
}

/* -- inputs -- */

void mrc_nscc_on_ack(struct mrc_nscc *n, int64_t acked, int has_rtt, double rtt_s, int ecn,
                     int32_t plane, double now_s) {
    enter(n);
    if (!has_rtt) {
        react(n, acked, ecn, 0, 0.0, now_s);
    } else {
        sample_rtt(n, rtt_s, now_s);
        double delay = rtt_s - n->base_rtt_s;
        if (!(delay > 0.0)) {
            delay = 0.0;
        }
        if (n->planes_on && plane >= 0 && (uint32_t)plane < n->n_planes && plane < 16) {
            delay = plane_delay(n, (uint32_t)plane, delay, now_s);
        }
        react(n, acked, ecn, 1, delay, now_s);
    }
    leave(n);
}

void mrc_nscc_on_trim(struct mrc_nscc *n, int last_hop, double now_s) {
    (void)last_hop;
    enter(n);
    n->trims++;
    double mtu = n->p.mtu;
    n->ignored += mtu;
    filter(n, n->p.configured_base_rtt_s, 1);
    n->trigger_qa = 1;
    if (!window(n, 1, 1, 0.0, now_s)) {
        n->cwnd_bytes -= mtu;
        clamp(n);
    }
    leave(n);
}

void mrc_nscc_on_timeout(struct mrc_nscc *n, double now_s) {
    (void)now_s;
    enter(n);
    n->timeouts++;
    n->cwnd_bytes -= n->p.mtu;
    clamp(n);
    leave(n);
}

void mrc_nscc_on_rcv_penalty(struct mrc_nscc *n, int64_t penalty, double now_s) {
    (void)now_s;
    if (penalty <= 0) {
        return;
    }
    enter(n);
    double cap = n->max_cwnd * (1.0 - (double)(penalty < 127 ? penalty : 127) / 128.0);
    if (n->cwnd_bytes > cap) {
        n->cwnd_bytes = cap;
        n->penalty_cuts++;
        clamp(n);
    }
    leave(n);
}
