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
#define GO_ON (-1000000) /* rx_batch: nothing to report, next batch (not an errno) */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* epoll_pwait2 (Linux 5.11: a nanosecond timeout) through syscall(2), so that an older C
 * library still builds this file; an older kernel says ENOSYS once and the loop waits with
 * epoll_wait and a timeout rounded up to whole milliseconds from then on (*ms_only = 1). */
static int wait_events(int epfd, int32_t *ms_only, struct epoll_event *evs, int max,
                       int64_t wait_ns) {
#ifdef SYS_epoll_pwait2
    if (!*ms_only) {
        struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
        long r = syscall(SYS_epoll_pwait2, epfd, evs, max, &ts, NULL, (size_t)0);
        if (r >= 0 || errno != ENOSYS) {
            return (int)r;
        }
        *ms_only = 1;
    }
#endif
    int64_t ms = (wait_ns + 999999) / 1000000;
    return epoll_wait(epfd, evs, max, ms > 1000000 ? 1000000 : (int)ms);
}

static int netdown(int64_t e) { return e == ENETDOWN || e == ENXIO || e == ENODEV; }

static void count_drop(const struct mrc_sw *sw, struct mrc_sw_port *p, int32_t reason,
                       int64_t n) {
    if (reason > 0 && (size_t)reason < sw->fwd.hist_len) {
        p->drops[reason] += n;
    }
}

/* A send on p failed with a link error: down it, as Python's DataPath.set_down does. */
static void link_down(const struct mrc_sw *sw, struct mrc_sw_port *p) {
    p->up = 0;
    count_drop(sw, p, sw->reason_port_down, mrc_eq_flush(p->q));
}

/* Account for what a send on p did; returns 1 if its link went down. */
static int sent(const struct mrc_sw *sw, struct mrc_sw_port *p, const struct mrc_fwd_sent *o) {
    p->tx_packets += o->sent;
    p->tx_bytes += o->bytes;
    if (o->failed == 0) {
        return 0;
    }
    if (netdown(o->err)) {
        count_drop(sw, p, sw->reason_port_down, o->failed);
        link_down(sw, p);
        return 1;
    }
    count_drop(sw, p, sw->reason_tx_error, o->failed);
    return 0;
}

/* Send what every queue may send by now (DataPath.tx); a port whose link went down is
 * reported in ev (LINK_DOWN: port, err) and the serving stops there (returns -1). Returns
 * the earliest time a queued frame may leave afterwards (INT64_MAX if none). */
static int64_t serve(struct mrc_sw *sw, int64_t now, struct mrc_sw_event *ev) {
    int64_t next = INT64_MAX;
    for (uint32_t i = 0; i < sw->n_ports; i++) {
        struct mrc_sw_port *p = &sw->ports[i];
        struct mrc_equeue *q = p->q;
        if (q->high_frames + q->data_frames + q->lossless_frames + q->wire_frames == 0) {
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
            struct mrc_fwd_sent s = {.sent = o[0], .failed = o[1], .err = o[2], .bytes = o[3]};
            if (sent(sw, p, &s)) {
                ev->why = MRC_SW_LINK_DOWN;
                ev->port = (int32_t)i;
                ev->err = (int32_t)s.err;
                return -1;
            }
            t = mrc_eq_next_send_ns(q, now);
        }
        if (t >= 0 && t < next) {
            next = t;
        }
    }
    return next;
}

/* One received batch of port pi (DataPath.rx): returns a code to report (ev filled), a
 * -errno, or GO_ON. */
static int rx_batch(struct mrc_sw *sw, uint32_t pi, int64_t now, struct mrc_sw_event *ev,
                    int *n_out) {
    struct mrc_sw_port *p = &sw->ports[pi];
    struct mrc_fwd_batch *b = &sw->fwd;
    uint32_t np = sw->n_ports;
    for (uint32_t j = 0; j < np; j++) { /* what may leave at once: the queues' budgets */
        struct mrc_sw_port *o = &sw->ports[j];
        int ok = o->up && o->tx_fd >= 0;
        b->budget[j] = ok ? mrc_eq_fast_budget(o->q, now) : -1;
        b->stamp_ns[j] = o->q->last_ns;
        b->fds[j] = ok ? o->tx_fd : -1;
    }
    b->hist = p->drops; /* drops decided on this in-port */
    int n = mrc_fwd_wake(b, &p->rx, p->head, now);
    *n_out = n;
    if (n < 0) {
        return n;
    }
    if (n == 0) {
        return GO_ON;
    }
    const struct mrc_fwd_result *res = &b->res;
    ev->port = (int32_t)pi;
    ev->frames = n;
    if (res->misses) {
        return MRC_SW_MISS;
    }
    p->rx_packets += n;
    p->rx_bytes += res->rx_bytes;
    int32_t down = -1;
    for (int64_t k = 0; k < res->n_sent_ports; k++) {
        uint32_t j = b->sent_ports[k]; /* < np: wake lists only its ports */
        struct mrc_sw_port *o = &sw->ports[j];
        mrc_eq_consume(o->q, b->port_bytes[j]);
        if (sent(sw, o, &b->sent[j])) {
            down = (int32_t)j;
            ev->err = (int32_t)b->sent[j].err;
        }
    }
    int64_t n_defer = res->n_defer, n_punt = 0;
    for (int64_t k = 0; k < n_defer; k++) {
        uint16_t i = b->defer[k];
        if (b->verdict[i] != MRC_FWD_QUEUE) {
            b->defer[n_punt++] = i; /* refused: Python decides it */
            continue;
        }
        uint32_t oi = (uint32_t)b->dec[i] & (MRC_FWD_MAX_PORTS - 1u); /* < np: plan checked it */
        struct mrc_sw_port *o = &sw->ports[oi];
        if (!o->up) {
            count_drop(sw, o, sw->reason_port_down, 1);
        } else if (mrc_eq_enqueue_in(o->q, p->rx.buf + p->rx.offs[i], p->rx.lens[i],
                                     (int32_t)pi) == MRC_EQ_DROPPED) {
            count_drop(sw, o, sw->reason_queue_full, 1);
        }
    }
    if (n_punt) {
        ev->n_punt = n_punt;
        ev->err = 0; /* a port this batch downed is up == 0: the caller finds it there */
        return MRC_SW_PUNT; /* the caller releases the batch */
    }
    if (!res->released) {
        mrc_ring_release(p->rx.buf, p->rx.buf_len, p->rx.block_size, p->rx.frame_size,
                         p->rx.frame_nr, p->head, (size_t)n);
    }
    p->head = (p->head + (size_t)n) % p->rx.frame_nr;
    if (down >= 0) {
        ev->port = down;
        return MRC_SW_LINK_DOWN;
    }
    ev->port = -1;
    ev->frames = 0;
    ev->err = 0;
    return GO_ON;
}

/* The first port whose lossless bytes crossed a PFC threshold in the direction its state
 * waits for (see MRC_SW_PFC), or -1. */
static int32_t pfc_port(const struct mrc_sw *sw) {
    if (sw->pfc_in_bytes == NULL) {
        return -1;
    }
    for (uint32_t i = 0; i < sw->n_ports; i++) {
        int64_t b = sw->pfc_in_bytes[i];
        if (sw->pfc_xoff[i] ? b <= sw->pfc_xon_bytes : b > sw->pfc_xoff_bytes) {
            return (int32_t)i;
        }
    }
    return -1;
}

static int check(const struct mrc_sw *sw) {
    if (sw == NULL || sw->ports == NULL || sw->n_ports == 0 ||
        sw->n_ports > MRC_SW_MAX_PORTS || sw->batches_per_wake == 0 ||
        sw->timer_slack_ns < 0 || sw->hold_ns < 0 || sw->hold_ns > 1000000000) {
        return 0;
    }
    const struct mrc_fwd_batch *b = &sw->fwd;
    if (b->n_ports != sw->n_ports || b->max_batch == 0 || b->max_batch > MRC_FWD_MAX_BATCH ||
        b->hist_len == 0 || b->l2 == NULL || b->l2_len / MRC_FWD_L2_LEN < b->n_ports ||
        b->dec == NULL || b->verdict == NULL || b->order == NULL || b->defer == NULL ||
        b->budget == NULL || b->port_bytes == NULL || b->port_count == NULL ||
        b->port_start == NULL || b->fds == NULL || b->sent == NULL || b->sent_ports == NULL ||
        b->rate_per_ns == NULL || b->burst == NULL || b->stamp_ns == NULL ||
        (sw->pfc_in_bytes != NULL &&
         (sw->pfc_xoff == NULL || !(0 <= sw->pfc_xon_bytes &&
                                    sw->pfc_xon_bytes < sw->pfc_xoff_bytes)))) {
        return 0;
    }
    for (uint32_t i = 0; i < sw->n_ports; i++) {
        const struct mrc_sw_port *p = &sw->ports[i];
        const struct mrc_fwd_rx *rx = &p->rx;
        if (p->q == NULL || p->q->mem == NULL || p->drops == NULL ||
            (p->rx_fd >= 0 &&
             (rx->buf == NULL || rx->offs == NULL || rx->lens == NULL || rx->table == NULL ||
              rx->slots == 0 || rx->slots > b->max_batch || rx->frame_nr == 0 ||
              p->head >= rx->frame_nr))) {
            return 0;
        }
    }
    return 1;
}

static void clear(struct mrc_sw_event *ev) {
    *ev = (struct mrc_sw_event){.why = MRC_SW_DEADLINE, .port = -1, .fd = -1};
}

static int group_check(const struct mrc_sw_group *g) {
    if (g == NULL || g->sw == NULL || g->n_sw == 0 || g->n_sw > MRC_SW_MAX_GROUP ||
        g->timer_slack_ns < 0 || g->hold_ns < 0 || g->hold_ns > 1000000000) {
        return 0;
    }
    for (uint32_t s = 0; s < g->n_sw; s++) {
        if (!check(g->sw[s])) {
            return 0;
        }
    }
    return 1;
}

/* The switch and port whose rx_fd is fd: returns 0 and sets *si, *pi, or -1 (not a port). */
static int find_port(const struct mrc_sw_group *g, int fd, uint32_t *si, uint32_t *pi) {
    for (uint32_t s = 0; s < g->n_sw; s++) {
        const struct mrc_sw *sw = g->sw[s];
        for (uint32_t i = 0; i < sw->n_ports; i++) {
            if (sw->ports[i].rx_fd == fd) {
                *si = s;
                *pi = i;
                return 0;
            }
        }
    }
    return -1;
}

/* Sleep ns (at most 1 s); -1 if a signal interrupted it. */
static int hold(int64_t ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return nanosleep(&ts, NULL) == 0 ? 0 : -1;
}

/* Every ready port of one wait: returns a code to report (ev filled), or GO_ON. Sets *frames
 * when a port of the group was ready (the loop then holds before its next wait). */
static int handle(struct mrc_sw_group *g, const struct epoll_event *evs, int ne,
                  struct mrc_sw_event *ev, int *frames) {
    for (int e = 0; e < ne; e++) {
        int fd = evs[e].data.fd;
        uint32_t si = 0, pi = 0;
        if (find_port(g, fd, &si, &pi) < 0) {
            ev->fd = fd;
            return ev->why = MRC_SW_OTHER_FD;
        }
        struct mrc_sw *sw = g->sw[si];
        if (sw->wake_stamp != g->wakeups) {
            sw->wake_stamp = g->wakeups;
            sw->port_wakeups++;
        }
        *frames = 1;
        if (evs[e].events & EPOLLERR) {
            ev->port = (int32_t)pi;
            ev->sw = (int32_t)si;
            return ev->why = MRC_SW_SOCK_ERR;
        }
        for (uint32_t k = 0; k < sw->batches_per_wake; k++) {
            int64_t t = now_ns();
            if (serve(sw, t, ev) < 0) {
                ev->sw = (int32_t)si;
                return ev->why; /* LINK_DOWN */
            }
            int n = 0;
            int code = rx_batch(sw, pi, t, ev, &n);
            if (code != GO_ON) {
                ev->sw = (int32_t)si;
                ev->why = code >= 0 ? code : MRC_SW_DEADLINE;
                return code;
            }
            int32_t pp = pfc_port(sw);
            if (pp >= 0) {
                ev->port = pp;
                ev->sw = (int32_t)si;
                return ev->why = MRC_SW_PFC;
            }
            if (n < (int)sw->ports[pi].rx.slots) {
                break;
            }
        }
    }
    return GO_ON;
}

static int group_loop(struct mrc_sw_group *g, int64_t deadline_ns, struct mrc_sw_event *ev) {
    clear(ev);
    struct epoll_event evs[MAX_EVENTS];
    int polling = 0; /* the last wait brought frames: hold, then look (hold_ns > 0) */
    for (;;) {
        int64_t now = now_ns();
        int64_t next = INT64_MAX;
        for (uint32_t s = 0; s < g->n_sw; s++) { /* what already waits leaves first */
            int64_t t = serve(g->sw[s], now, ev);
            if (t < 0) {
                ev->sw = (int32_t)s;
                return ev->why; /* LINK_DOWN */
            }
            next = t < next ? t : next;
            int32_t pp = pfc_port(g->sw[s]);
            if (pp >= 0) { /* sent frames took a port down to XON (or a batch above XOFF) */
                ev->port = pp;
                ev->sw = (int32_t)s;
                return ev->why = MRC_SW_PFC;
            }
        }
        if (now >= deadline_ns) {
            return ev->why = MRC_SW_DEADLINE;
        }
        int64_t until = deadline_ns;
        if (next != INT64_MAX && next < until - g->timer_slack_ns) { /* no overflow */
            until = next + g->timer_slack_ns;
        }
        int64_t wait = until > now ? until - now : 0;
        int ne;
        if (polling && g->hold_ns > 0) {
            /* frames came on the last wake-up: more are likely on their way; sleep without
             * being woken by each of them, then take what came in one go */
            if (hold(wait < g->hold_ns ? wait : g->hold_ns) < 0) {
                return ev->why = MRC_SW_EINTR;
            }
            g->holds++;
            ne = wait_events(g->epfd, &g->wait_ms_only, evs, MAX_EVENTS, 0);
        } else {
            ne = wait_events(g->epfd, &g->wait_ms_only, evs, MAX_EVENTS, wait);
        }
        if (ne < 0) {
            if (errno == EINTR) {
                return ev->why = MRC_SW_EINTR;
            }
            return -errno;
        }
        if (ne == 0) {
            if (!polling) {
                g->timer_wakeups++;
            }
            polling = 0; /* nothing came while holding: wait to be woken again */
            continue;
        }
        g->wakeups++;
        int frames = 0;
        int code = handle(g, evs, ne, ev, &frames);
        if (code != GO_ON) {
            return code;
        }
        polling = frames;
    }
}

int mrc_sw_group_poll(struct mrc_sw_group *g, int64_t deadline_ns, struct mrc_sw_event *ev) {
    if (ev == NULL || !group_check(g)) {
        return -EINVAL;
    }
    return group_loop(g, deadline_ns, ev);
}

int mrc_sw_poll(struct mrc_sw *sw, int64_t deadline_ns, struct mrc_sw_event *ev) {
    if (ev == NULL || !check(sw)) {
        return -EINVAL;
    }
    struct mrc_sw *one[1] = {sw};
    struct mrc_sw_group g = {.epfd = sw->epfd, .n_sw = 1, .sw = one,
                             .timer_slack_ns = sw->timer_slack_ns, .hold_ns = sw->hold_ns,
                             .wakeups = sw->wakeups, .timer_wakeups = sw->timer_wakeups,
                             .holds = sw->holds, .wait_ms_only = sw->wait_ms_only};
    int r = group_loop(&g, deadline_ns, ev);
    sw->wakeups = g.wakeups;
    sw->timer_wakeups = g.timer_wakeups;
    sw->holds = g.holds;
    sw->wait_ms_only = g.wait_ms_only;
    return r;
}
