/* mrc-switch's C event loop (see mrc_swloop.h). */
#include "mrc_swloop.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mrc_equeue.h"
#include "mrc_fcache.h"
#include "mrc_io.h"

#define MAX_EVENTS 32 /* events per wait: the others stay ready (level-triggered) */
#define MAX_PORTS 1024
#define GO_ON (-1000000) /* rx_batch: nothing to report, next batch (not an errno) */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* epoll_pwait2 (Linux 5.11: a nanosecond timeout) through syscall(2), so that an older C
 * library still builds this file; an older kernel says ENOSYS once and the loop waits with
 * epoll_wait and a timeout rounded up to whole milliseconds from then on. */
static int wait_events(struct mrc_sw *sw, struct epoll_event *evs, int max, int64_t wait_ns) {
    int epfd = sw->epfd;
#ifdef SYS_epoll_pwait2
    if (!sw->wait_ms_only) {
        struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
        long r = syscall(SYS_epoll_pwait2, epfd, evs, max, &ts, NULL, (size_t)0);
        if (r >= 0 || errno != ENOSYS) {
            return (int)r;
        }
        sw->wait_ms_only = 1;
    }
#endif
    int64_t ms = (wait_ns + 999999) / 1000000;
    return epoll_wait(epfd, evs, max, ms > 1000000 ? 1000000 : (int)ms);
}

static int netdown(int64_t e) { return e == ENETDOWN || e == ENXIO || e == ENODEV; }

static void count_drop(const struct mrc_sw *sw, struct mrc_sw_port *p, int32_t reason,
                       int64_t n) {
    if (reason > 0 && (size_t)reason < sw->hist_len) {
        p->drops[reason] += n;
    }
}

/* A send on p failed with a link error: down it, as Python's Switch._set_down does. */
static void link_down(const struct mrc_sw *sw, struct mrc_sw_port *p) {
    p->up = 0;
    count_drop(sw, p, sw->reason_port_down, mrc_eq_flush(p->q));
}

/* Account for what a send on p did; returns 1 if its link went down. */
static int sent(const struct mrc_sw *sw, struct mrc_sw_port *p, const int64_t *o) {
    p->tx_packets += o[0];
    p->tx_bytes += o[3];
    if (o[1] == 0) {
        return 0;
    }
    if (netdown(o[2])) {
        count_drop(sw, p, sw->reason_port_down, o[1]);
        link_down(sw, p);
        return 1;
    }
    count_drop(sw, p, sw->reason_tx_error, o[1]);
    return 0;
}

/* Send what every queue may send by now (Switch._tx); a port whose link went down is
 * reported through *down (its index) and the serving stops there. Returns the earliest time
 * a queued frame may leave afterwards (INT64_MAX if none). */
static int64_t serve(struct mrc_sw *sw, int64_t now, int64_t *down, int64_t *err) {
    int64_t next = INT64_MAX;
    for (uint32_t i = 0; i < sw->n_ports; i++) {
        struct mrc_sw_port *p = &sw->ports[i];
        struct mrc_equeue *q = p->q;
        if (q->high_frames + q->data_frames == 0) {
            continue;
        }
        if (!p->up || p->tx_fd < 0) {
            count_drop(sw, p, sw->reason_port_down, mrc_eq_flush(q));
            continue;
        }
        int64_t t = mrc_eq_next_send_ns(q, now);
        if (t >= 0 && t <= now) {
            int64_t o[4] = {0, 0, 0, 0};
            mrc_eq_send(q, p->tx_fd, now, o);
            if (sent(sw, p, o)) {
                *down = i;
                *err = o[2];
                return next;
            }
            t = mrc_eq_next_send_ns(q, now);
        }
        if (t >= 0 && t < next) {
            next = t;
        }
    }
    return next;
}

/* One received batch of port pi (Switch._rx): returns a code to report, a -errno, or GO_ON. */
static int rx_batch(struct mrc_sw *sw, uint32_t pi, int64_t now, int64_t *out, int *n_out) {
    struct mrc_sw_port *p = &sw->ports[pi];
    uint32_t np = sw->n_ports;
    for (uint32_t j = 0; j < np; j++) { /* what may leave at once: the queues' budgets */
        struct mrc_sw_port *o = &sw->ports[j];
        int ok = o->up && o->tx_fd >= 0;
        sw->budget[j] = ok ? mrc_eq_fast_budget(o->q, now) : -1;
        sw->stamp_ns[j] = o->q->last_ns;
        sw->fds[j] = ok ? o->tx_fd : -1;
    }
    int64_t *res = sw->res;
    int n = mrc_fwd_wake(p->ring, p->ring_len, p->block_size, p->frame_size, p->frame_nr,
                         p->head, sw->slots, p->offs, p->lens, sw->cap, p->fcache,
                         p->fcache_len, sw->dec, sw->verdict, sw->l2, 12 * (size_t)np,
                         sw->block_bytes, sw->budget, sw->port_bytes, sw->port_count,
                         sw->port_start, np, sw->order, sw->defer, p->drops, sw->hist_len,
                         sw->totals, sw->fds, sw->port_out, res, now, sw->rate_per_ns,
                         sw->burst, sw->stamp_ns);
    *n_out = n;
    if (n < 0) {
        return n;
    }
    if (n == 0) {
        return GO_ON;
    }
    out[1] = pi;
    out[2] = n;
    if (res[1]) {
        return MRC_SW_MISS;
    }
    p->rx_packets += n;
    p->rx_bytes += sw->totals[0];
    int64_t down = -1;
    for (int64_t k = 0; k < res[4]; k++) {
        int64_t j = res[MRC_WAKE_RES_LEN + k];
        struct mrc_sw_port *o = &sw->ports[j];
        mrc_eq_consume(o->q, sw->port_bytes[j]);
        if (sent(sw, o, sw->port_out + 4 * j)) {
            down = j;
            out[3] = sw->port_out[4 * j + 2];
        }
    }
    int64_t n_defer = res[2], n_punt = 0;
    for (int64_t k = 0; k < n_defer; k++) {
        uint16_t i = sw->defer[k];
        if (sw->verdict[i] != 1 /* MRC_FWD_QUEUE */) {
            sw->defer[n_punt++] = i; /* refused: Python decides it */
            continue;
        }
        uint32_t oi = (uint32_t)sw->dec[i] & 0xFFFFu; /* < np: plan checked it */
        struct mrc_sw_port *o = &sw->ports[oi];
        if (!o->up) {
            count_drop(sw, o, sw->reason_port_down, 1);
        } else if (mrc_eq_enqueue(o->q, p->ring + p->offs[i], p->lens[i]) == MRC_EQ_DROPPED) {
            count_drop(sw, o, sw->reason_queue_full, 1);
        }
    }
    if (n_punt) {
        out[3] = n_punt;
        return MRC_SW_PUNT; /* the caller releases the batch */
    }
    if (!res[3]) {
        mrc_ring_release(p->ring, p->ring_len, p->block_size, p->frame_size, p->frame_nr,
                         p->head, (size_t)n);
    }
    p->head = (p->head + (size_t)n) % p->frame_nr;
    if (down >= 0) {
        out[1] = down;
        return MRC_SW_LINK_DOWN;
    }
    return GO_ON;
}

static int check(const struct mrc_sw *sw) {
    if (sw == NULL || sw->ports == NULL || sw->n_ports == 0 || sw->n_ports > MAX_PORTS ||
        sw->slots == 0 || sw->slots > 0xFFFFu || sw->batches_per_wake == 0 ||
        sw->hist_len == 0 || sw->l2 == NULL || sw->dec == NULL || sw->verdict == NULL ||
        sw->order == NULL || sw->defer == NULL || sw->budget == NULL ||
        sw->port_bytes == NULL || sw->port_count == NULL || sw->port_start == NULL ||
        sw->fds == NULL || sw->port_out == NULL || sw->res == NULL ||
        sw->rate_per_ns == NULL || sw->burst == NULL || sw->stamp_ns == NULL ||
        sw->totals == NULL || sw->timer_slack_ns < 0) {
        return 0;
    }
    for (uint32_t i = 0; i < sw->n_ports; i++) {
        const struct mrc_sw_port *p = &sw->ports[i];
        if (p->q == NULL || p->q->mem == NULL || p->drops == NULL ||
            (p->rx_fd >= 0 && (p->ring == NULL || p->offs == NULL || p->lens == NULL ||
                               p->fcache == NULL || p->frame_nr == 0 ||
                               p->head >= p->frame_nr))) {
            return 0;
        }
    }
    return 1;
}

int mrc_sw_poll(struct mrc_sw *sw, int64_t deadline_ns, int64_t *out) {
    if (out == NULL || !check(sw)) {
        return -EINVAL;
    }
    for (int k = 0; k < 4; k++) {
        out[k] = 0;
    }
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        int64_t now = now_ns(), down = -1;
        int64_t next = serve(sw, now, &down, &out[3]); /* what already waits leaves first */
        if (down >= 0) {
            out[1] = down;
            return out[0] = MRC_SW_LINK_DOWN;
        }
        if (now >= deadline_ns) {
            return out[0] = MRC_SW_DEADLINE;
        }
        int64_t until = deadline_ns;
        if (next != INT64_MAX && next < until - sw->timer_slack_ns) { /* no overflow */
            until = next + sw->timer_slack_ns;
        }
        int64_t wait = until > now ? until - now : 0;
        int ne = wait_events(sw, evs, MAX_EVENTS, wait);
        if (ne < 0) {
            if (errno == EINTR) {
                return out[0] = MRC_SW_EINTR;
            }
            return -errno;
        }
        if (ne == 0) {
            sw->timer_wakeups++;
            continue;
        }
        sw->wakeups++;
        for (int e = 0; e < ne; e++) {
            int fd = evs[e].data.fd;
            uint32_t pi = 0;
            while (pi < sw->n_ports && sw->ports[pi].rx_fd != fd) {
                pi++;
            }
            if (pi == sw->n_ports) {
                out[1] = fd;
                return out[0] = MRC_SW_OTHER_FD;
            }
            if (evs[e].events & EPOLLERR) {
                out[1] = pi;
                return out[0] = MRC_SW_SOCK_ERR;
            }
            for (uint32_t b = 0; b < sw->batches_per_wake; b++) {
                int64_t t = now_ns();
                down = -1;
                serve(sw, t, &down, &out[3]);
                if (down >= 0) {
                    out[1] = down;
                    return out[0] = MRC_SW_LINK_DOWN;
                }
                int n = 0;
                int code = rx_batch(sw, pi, t, out, &n);
                if (code != GO_ON) {
                    out[0] = code >= 0 ? code : 0;
                    return code;
                }
                if (n < (int)sw->slots) {
                    break;
                }
            }
        }
    }
}
