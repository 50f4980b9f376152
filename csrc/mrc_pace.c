/* The NIC's per-port pacers over their C queues (see mrc_pace.h). The arithmetic follows
 * mrcnic/io/pacing.py's PortPacer operation for operation (same doubles, same order), so the
 * parity tests hold the two to the same tokens bit for bit. */
#include "mrc_pace.h"

#include <stddef.h>

/* PortPacer._refill: tokens += elapsed x rate, at most burst_bytes. */
static void refill(struct mrc_pace_port *p, double now_s) {
    double dt = now_s - p->last_s;
    if (dt > 0) {
        double t = p->tokens + dt * p->rate_Bps;
        p->tokens = t < p->burst_bytes ? t : p->burst_bytes;
        p->last_s = now_s;
    }
}

static uint32_t qlen(const struct mrc_txq *q) { return q != NULL ? q->n : 0; }

int mrc_pace_room(const struct mrc_pace *ps) {
    int live = 0;
    for (uint32_t i = 0; i < ps->n; i++) {
        const struct mrc_pace_port *p = &ps->port[i];
        if (p->up) {
            live = 1;
            if (qlen(p->cq) >= p->data_limit) {
                return 0;
            }
        }
    }
    return live ? 1 : -1;
}

static void send_some(struct mrc_pace *ps, struct mrc_pace_port *p, struct mrc_txq *q,
                      uint32_t k) {
    if (k == 0) {
        return;
    }
    struct mrc_txq_sent r;
    /* no socket: as the shell's OutBatch.drop, the queue goes, all of it (a refused n
     * never happens: k came from mrc_txq_take on q) */
    if (p->fd < 0 || mrc_txq_send(q, p->fd, k, &r) < 0) {
        p->tx_down_drops += mrc_txq_clear(q);
        ps->errs++;
        return;
    }
    p->tx_frames += r.sent;
    p->tx_bytes += r.bytes;
    if (r.failed) {
        p->last_errno = r.err;
        if (r.down) {
            p->tx_down_drops += r.failed;
            p->netdown = 1;
        } else {
            p->tx_lost += r.failed;
        }
        ps->errs++;
    }
}

uint32_t mrc_pace_serve(struct mrc_pace *ps, double now_s) {
    uint32_t blocking = 0;
    for (uint32_t i = 0; i < ps->n; i++) {
        struct mrc_pace_port *p = &ps->port[i];
        uint32_t nh = qlen(p->chq), nd = qlen(p->cq);
        if (nh + nd > 0) {
            refill(p, now_s);
            double tokens = p->tokens;
            uint32_t kh = 0, kd = 0;
            if (tokens > 0) {
                if (nh) {
                    kh = mrc_txq_take(p->chq, &tokens);
                }
                if (tokens > 0 && nd) {
                    kd = mrc_txq_take(p->cq, &tokens);
                    if (nd > p->max_data_frames) {
                        p->max_data_frames = nd;
                    }
                }
                p->tokens = tokens;
            }
            send_some(ps, p, p->chq, kh);
            if (!p->netdown) { /* (down: its data is the shell's to flush, not to send) */
                send_some(ps, p, p->cq, kd);
            }
        }
        /* every port, as the shell's test; a port a send found down is not (the shell
         * flushes it next, as the Python path does inside its send) */
        if (qlen(p->cq) && !p->netdown) {
            blocking++;
        }
    }
    return blocking;
}

int mrc_pace_next(struct mrc_pace *ps, double now_s, double tick_s, double *at) {
    int any = 0;
    double nxt = 0.0;
    double tick = now_s + tick_s;
    for (uint32_t i = 0; i < ps->n; i++) {
        struct mrc_pace_port *p = &ps->port[i];
        uint32_t nh = qlen(p->chq);
        if (nh + qlen(p->cq) == 0) {
            continue;
        }
        refill(p, now_s);
        double d = p->tokens > 0 ? now_s : now_s + (1e-9 - p->tokens) / p->rate_Bps;
        if (d < tick && nh == 0) {
            d = tick; /* only data waits: the next pacing tick (the bucket bounds the burst) */
        }
        if (!any || d < nxt) {
            nxt = d;
            any = 1;
        }
    }
    *at = nxt;
    return any;
}
