/* The simulator's fabric in C (see mrc_simnet.h). Each function names the Python it is the
 * twin of; the order of its steps (and so of the events it schedules) follows it exactly. */
#include "mrc_simnet.h"

#include <string.h>

#include "mrc_mt.h"
#include "mrc_rxe.h"
#include "mrc_trim.h"
#include "mrc_txe.h"

_Static_assert((int)MRC_SIM_MAX_ENGINES == (int)MRC_RXE_MAX_QPS, "a host's engines: its device's QPs");
#include "mrc_wire.h"

enum {
    CHUNK = 1 << MRC_SIM_CHUNK_SHIFT,
    OFF_TC_HI = MRC_WIRE_OFF_TC_HI,
    OFF_TC_LO = MRC_WIRE_OFF_TC_LO,
    OFF_DST = MRC_WIRE_OFF_DST,
    OFF_BTH = MRC_WIRE_OFF_BTH,
    ECN_BITS = MRC_WIRE_TC_LO_ECN_MASK
};

static inline uint8_t *fdata(struct mrc_simnet *n, int32_t i) {
    return n->chunk[(uint32_t)i >> MRC_SIM_CHUNK_SHIFT] + (size_t)(i & (CHUNK - 1)) * n->slot_len;
}

static inline struct mrc_simnet_frame *fmeta(struct mrc_simnet *n, int32_t i) {
    return &n->meta[(uint32_t)i >> MRC_SIM_CHUNK_SHIFT][i & (CHUNK - 1)];
}

static inline int dscp_of(const uint8_t *f) {
    return (f[OFF_TC_HI] & MRC_WIRE_TC_HI_DSCP_MASK) << 2 | f[OFF_TC_LO] >> 6;
}

/* The frame's class (MRC_SIM_F_*): layout.HIGH_PRIORITY_DSCPS (control and trimmed
 * headers), ECN-capable, trimmable. */
static inline uint8_t classify(const uint8_t *f) {
    int d = dscp_of(f);
    uint8_t c = (f[OFF_TC_LO] & ECN_BITS) ? MRC_SIM_F_ECT : 0;
    if (d == MRC_WIRE_DSCP_CONTROL || d == MRC_WIRE_DSCP_TRIMMED ||
        d == MRC_WIRE_DSCP_TRIMMED_LASTHOP) {
        c |= MRC_SIM_F_HIGH;
    } else if (d == MRC_WIRE_DSCP_TRIMMABLE || d == MRC_WIRE_DSCP_TRIMMABLE_RETX) {
        c |= MRC_SIM_F_TRIMMABLE;
    }
    return c;
}

/* --- the pool ---------------------------------------------------------------------------- */

static int32_t alloc_frame(struct mrc_simnet *n) {
    int32_t i = n->free_head;
    if (i < 0) {
        return -1;
    }
    n->free_head = fmeta(n, i)->next;
    n->n_free--;
    return i;
}

static void free_frame(struct mrc_simnet *n, int32_t i) {
    fmeta(n, i)->next = n->free_head;
    n->free_head = i;
    n->n_free++;
}

void mrc_simnet_reset(struct mrc_simnet *n) {
    n->now = 0.0;
    n->seq = 0;
    n->heap_n = 0;
    n->n_routes = 0;
    for (uint32_t s = 0; s < n->hash_cap; s++) {
        n->slots[s] = -1;
    }
    n->n_chunks = 0;
    n->free_head = -1;
    n->n_free = 0;
    n->pending_free = -1;
    n->late_k = -1;
    n->late_bytes = 0;
    for (uint32_t h = 0; h < n->n_hosts; h++) {
        for (int e = 0; e < MRC_SIM_MAX_ENGINES; e++) {
            n->hosts[h].ack_at[e] = -1.0;
        }
    }
    for (uint32_t p = 0; p < n->n_ports; p++) {
        struct mrc_simnet_port *q = &n->ports[p];
        q->high_head = q->high_tail = q->data_head = q->data_tail = -1;
        q->n_high = q->n_data = 0;
    }
}

int mrc_simnet_add_chunk(struct mrc_simnet *n, uint8_t *data, struct mrc_simnet_frame *meta) {
    if (n->n_chunks >= MRC_SIM_MAX_CHUNKS) {
        return MRC_SIM_BAD;
    }
    uint32_t c = n->n_chunks++;
    n->chunk[c] = data;
    n->meta[c] = meta;
    /* the new slots to the free list, lowest index first */
    for (int32_t k = CHUNK - 1; k >= 0; k--) {
        free_frame(n, (int32_t)(c << MRC_SIM_CHUNK_SHIFT) + k);
    }
    return 0;
}

uint8_t *mrc_simnet_frame(struct mrc_simnet *n, int32_t i, uint32_t *len) {
    if (i < 0 || (uint32_t)i >= (n->n_chunks << MRC_SIM_CHUNK_SHIFT)) {
        *len = 0;
        return NULL;
    }
    *len = fmeta(n, i)->len;
    return fdata(n, i);
}

/* --- the event heap: (t, seq) order, as Python's heapq of (t, seq, ...) tuples ----------- */

static inline int before(const struct mrc_simnet_event *a, const struct mrc_simnet_event *b) {
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

/* A 4-ary heap: half the levels of a binary one, and a node's four children share a cache
 * line or two (the order is (t, seq) whatever the arity). */
static void sift_up(struct mrc_simnet_event *h, uint32_t i) {
    struct mrc_simnet_event e = h[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 4;
        if (!before(&e, &h[p])) {
            break;
        }
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static void sift_down(struct mrc_simnet_event *h, uint32_t n, uint32_t i) {
    struct mrc_simnet_event e = h[i];
    for (;;) {
        uint32_t c = 4 * i + 1;
        if (c >= n) {
            break;
        }
        uint32_t end = c + 4 < n ? c + 4 : n;
        uint32_t best = c;
        for (uint32_t k = c + 1; k < end; k++) {
            if (before(&h[k], &h[best])) {
                best = k;
            }
        }
        if (!before(&h[best], &e)) {
            break;
        }
        h[i] = h[best];
        i = best;
    }
    h[i] = e;
}

/* push (t, ++seq, kind, a); the callers keep MRC_SIM_RESERVE entries free */
static void push(struct mrc_simnet *n, double t, int32_t kind, int32_t a) {
    uint32_t i = n->heap_n++;
    n->seq++;
    n->heap[i] = (struct mrc_simnet_event){t, n->seq, kind, a};
    sift_up(n->heap, i);
}

static struct mrc_simnet_event pop(struct mrc_simnet *n) {
    struct mrc_simnet_event top = n->heap[0];
    n->heap_n--;
    if (n->heap_n) {
        n->heap[0] = n->heap[n->heap_n];
        sift_down(n->heap, n->heap_n, 0);
    }
    return top;
}

int mrc_simnet_grow_heap(struct mrc_simnet *n, struct mrc_simnet_event *heap, uint32_t cap) {
    if (cap < n->heap_n) {
        return MRC_SIM_BAD;
    }
    if (n->heap_n) {
        memmove(heap, n->heap, n->heap_n * sizeof(*heap));
    }
    n->heap = heap;
    n->heap_cap = cap;
    return 0;
}

static inline int room(struct mrc_simnet *n) {
    if (n->heap_cap - n->heap_n < MRC_SIM_RESERVE) {
        return MRC_SIM_NO_EVENT;
    }
    if (n->n_free < MRC_SIM_RESERVE) {
        return MRC_SIM_NO_FRAME;
    }
    return 0;
}

int mrc_simnet_at(struct mrc_simnet *n, double t, int32_t id) {
    if (n->heap_n >= n->heap_cap) {
        return MRC_SIM_NO_EVENT;
    }
    push(n, t, MRC_SIM_EV_CALL, id);
    return 0;
}

/* --- routes -------------------------------------------------------------------------------- */

static inline uint32_t hash_key(const uint8_t *k) {
    uint64_t a, b;
    memcpy(&a, k, 8);
    memcpy(&b, k + 8, 8);
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ b;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static int32_t find_route(const struct mrc_simnet *n, const uint8_t *key) {
    uint32_t mask = n->hash_cap - 1;
    for (uint32_t s = hash_key(key) & mask;; s = (s + 1) & mask) {
        int32_t r = n->slots[s];
        if (r < 0) {
            return -1;
        }
        if (memcmp(n->keys + (size_t)s * 16, key, 16) == 0) {
            return r;
        }
    }
}

int mrc_simnet_add_route(struct mrc_simnet *n, const uint8_t *key, const int32_t *links,
                         uint32_t nlinks, uint32_t dst) {
    if (2 * (uint64_t)n->routes_cap > n->hash_cap || nlinks > 3 || dst >= n->n_hosts) {
        return MRC_SIM_BAD;
    }
    for (uint32_t k = 0; k < nlinks; k++) {
        if (links[k] < 0 || (uint32_t)links[k] >= n->n_links) {
            return MRC_SIM_BAD;
        }
    }
    int32_t have = find_route(n, key);
    if (have < 0 && n->n_routes >= n->routes_cap) {
        return MRC_SIM_BAD;
    }
    int32_t r = have >= 0 ? have : (int32_t)n->n_routes++;
    struct mrc_simnet_route *rt = &n->routes[r];
    rt->n = nlinks;
    rt->dst = dst;
    for (uint32_t k = 0; k < 3; k++) {
        rt->link[k] = k < nlinks ? links[k] : -1;
    }
    if (have < 0) {
        uint32_t mask = n->hash_cap - 1;
        uint32_t s = hash_key(key) & mask;
        while (n->slots[s] >= 0) {
            s = (s + 1) & mask;
        }
        memcpy(n->keys + (size_t)s * 16, key, 16);
        n->slots[s] = r;
    }
    return r;
}

/* --- a NIC port: HostPort ------------------------------------------------------------------ */

static void list_append(struct mrc_simnet *n, int32_t *head, int32_t *tail, int32_t i) {
    fmeta(n, i)->next = -1;
    if (*tail >= 0) {
        fmeta(n, *tail)->next = i;
    } else {
        *head = i;
    }
    *tail = i;
}

static int32_t list_pop(struct mrc_simnet *n, int32_t *head, int32_t *tail) {
    int32_t i = *head;
    *head = fmeta(n, i)->next;
    if (*head < 0) {
        *tail = -1;
    }
    return i;
}

/* HostPort._serve. Returns 1 when the data queue drained below its limit (the gate runs). */
static int serve(struct mrc_simnet *n, uint32_t pi, double t) {
    struct mrc_simnet_port *p = &n->ports[pi];
    int32_t i;
    int drained = 0;
    if (p->n_high) {
        i = list_pop(n, &p->high_head, &p->high_tail);
        p->n_high--;
    } else if (p->n_data) {
        i = list_pop(n, &p->data_head, &p->data_tail);
        p->n_data--;
        drained = p->n_data == p->data_limit - 1;
    } else {
        p->busy = 0;
        return 0;
    }
    struct mrc_simnet_frame *m = fmeta(n, i);
    if (p->busy) {
        p->backlog -= m->len;
    }
    p->busy = 1;
    p->tx_packets++;
    double done = t + (double)m->len / p->bytes_per_s;
    m->stage = 0;
    push(n, done, MRC_SIM_EV_FRAME, i); /* the frame reaches its first link */
    push(n, done, MRC_SIM_EV_PORT, (int32_t)pi); /* then the port serves its next */
    if (drained) {
        n->hosts[p->host].gate_full--;
        return 1;
    }
    return 0;
}

/* HostPort.enqueue. Returns serve's drained flag. */
static int port_enqueue(struct mrc_simnet *n, uint32_t pi, int32_t i, double t) {
    struct mrc_simnet_port *p = &n->ports[pi];
    struct mrc_simnet_frame *m = fmeta(n, i);
    if (!p->up) {
        p->drops++;
        free_frame(n, i);
        return 0;
    }
    if (m->flags & MRC_SIM_F_HIGH) {
        list_append(n, &p->high_head, &p->high_tail, i);
        p->n_high++;
    } else {
        list_append(n, &p->data_head, &p->data_tail, i);
        p->n_data++;
        if ((int64_t)p->n_data > p->max_data_frames) {
            p->max_data_frames = p->n_data;
        }
        if (p->n_data == p->data_limit) {
            n->hosts[p->host].gate_full++; /* the host takes no more data until it drains */
        }
    }
    if (p->busy) {
        p->backlog += m->len;
        if (p->backlog > p->max_backlog) {
            p->max_backlog = p->backlog;
        }
        return 0;
    }
    return serve(n, pi, t);
}

int mrc_simnet_port_set_up(struct mrc_simnet *n, uint32_t pi, int up) {
    if (pi >= n->n_ports) {
        return MRC_SIM_BAD;
    }
    struct mrc_simnet_port *p = &n->ports[pi];
    p->up = up ? 1 : 0;
    if (up) {
        return 0;
    }
    int was_full = p->n_data >= p->data_limit;
    p->drops += p->n_high + p->n_data;
    while (p->n_high) {
        free_frame(n, list_pop(n, &p->high_head, &p->high_tail));
        p->n_high--;
    }
    while (p->n_data) {
        free_frame(n, list_pop(n, &p->data_head, &p->data_tail));
        p->n_data--;
    }
    p->backlog = 0;
    if (was_full) {
        n->hosts[p->host].gate_full--;
        return 1;
    }
    return 0;
}

/* --- a link: Link.transmit ------------------------------------------------------------------ */

/* The frame enters link l at t: returns its arrival time at the far end, or -1 (lost; the
 * caller frees it). The frame may be cut (trim) or marked in place. */
static double transmit(struct mrc_simnet *n, struct mrc_simnet_link *l, double t, int32_t i) {
    if (!l->up) {
        l->drops++;
        return -1.0;
    }
    if (l->loss != 0.0 && mrc_mt_random(n->mt, &n->mti) < l->loss) {
        l->losses++;
        return -1.0;
    }
    struct mrc_simnet_frame *m = fmeta(n, i);
    uint32_t len = m->len;
    int high = m->flags & MRC_SIM_F_HIGH;
    double busy = l->busy_until;
    double backlog = busy > t ? (busy - t) * l->bytes_per_s : 0.0;
    if (!high) {
        if (l->queue_bytes >= 0 && backlog + (double)len > (double)l->queue_bytes) {
            size_t cut = 0;
            if (l->trim && (m->flags & MRC_SIM_F_TRIMMABLE)) {
                uint8_t *f = fdata(n, i);
                cut = mrc_trim_cut(f, len, f, 0, l->last_hop, 32);
                if (cut) {
                    m->flags = classify(f);
                }
            }
            if (cut == 0) {
                l->drops++;
                return -1.0;
            }
            len = m->len = (uint32_t)cut; /* the header goes high priority */
            high = 1;
            l->trims++;
        } else if (l->ecn_bytes >= 0 && backlog > (double)l->ecn_bytes &&
                   (m->flags & MRC_SIM_F_ECT)) {
            l->marks++;
            fdata(n, i)[OFF_TC_LO] |= ECN_BITS; /* layout.set_ce (CE is still ECN-capable) */
        }
    }
    if (backlog > (double)l->max_backlog) {
        l->max_backlog = (int64_t)backlog;
    }
    double start = busy > t ? busy : t;
    double done = start + (double)len / l->bytes_per_s;
    l->busy_until = done;
    l->tx_packets++;
    l->tx_bytes += len;
    /* high priority waits only for the packet in service (Link.transmit's approximation) */
    if (high && busy > t) {
        done = t + (double)len / l->bytes_per_s;
    }
    return done + l->prop_s;
}

/* --- sending: ClosFabric.send ---------------------------------------------------------------- */

static int route_and_queue(struct mrc_simnet *n, uint32_t host, uint32_t plane, int32_t i,
                           double t) {
    int32_t r = find_route(n, fdata(n, i) + OFF_DST);
    if (r < 0) {
        return MRC_SIM_NO_ROUTE;
    }
    struct mrc_simnet_frame *m = fmeta(n, i);
    m->route = r;
    m->stage = 0;
    m->port = (uint8_t)plane;
    m->flags = classify(fdata(n, i));
    return port_enqueue(n, host * n->planes + plane, i, t);
}

int mrc_simnet_send(struct mrc_simnet *n, uint32_t host, uint32_t plane, const uint8_t *frame,
                    uint32_t len, double t) {
    if (host >= n->n_hosts || plane >= n->planes || len > n->slot_len || len < OFF_DST + 16) {
        return MRC_SIM_BAD;
    }
    if (find_route(n, frame + OFF_DST) < 0) {
        return MRC_SIM_NO_ROUTE;
    }
    if (n->heap_cap - n->heap_n < 2) {
        return MRC_SIM_NO_EVENT;
    }
    int32_t i = alloc_frame(n);
    if (i < 0) {
        return MRC_SIM_NO_FRAME;
    }
    memcpy(fdata(n, i), frame, len);
    fmeta(n, i)->len = len;
    return route_and_queue(n, host, plane, i, t);
}

int mrc_simnet_send_many(struct mrc_simnet *n, uint32_t host, const uint8_t *buf,
                         uint32_t slot_len, const uint32_t *lens, const uint8_t *planes,
                         uint32_t count, int32_t *drained) {
    *drained = 0;
    if (host >= n->n_hosts) {
        return MRC_SIM_BAD;
    }
    if (n->heap_cap - n->heap_n < 2 * count) {
        return MRC_SIM_NO_EVENT;
    }
    if (n->n_free < count) {
        return MRC_SIM_NO_FRAME;
    }
    uint32_t k = 0;
    while (k < count) {
        uint32_t len = lens[k];
        const uint8_t *f = buf + (size_t)k * slot_len;
        uint8_t plane = planes[k++];
        if (plane >= n->planes || len > n->slot_len || len > slot_len || len < OFF_DST + 16) {
            n->st.misrouted++;
            continue;
        }
        int32_t i = alloc_frame(n);
        memcpy(fdata(n, i), f, len);
        fmeta(n, i)->len = len;
        int r = route_and_queue(n, host, plane, i, n->now);
        if (r < 0) {
            n->st.misrouted++;
            free_frame(n, i);
        } else if (r == 1) {
            *drained = 1;
            break;
        }
    }
    return (int)k;
}

/* --- delivery to a host's C engines ------------------------------------------------------------ */

/* The control frames the host's engines built (dev->out) to its ports, as the pump's sends. */
static void drain_out(struct mrc_simnet *n, uint32_t host, struct mrc_rxe_dev *d, double t) {
    struct mrc_rxe_out *o = d->out;
    for (uint32_t k = 0; k < o->n; k++) {
        int32_t i = alloc_frame(n);
        if (i < 0) {
            break; /* cannot happen: run keeps MRC_SIM_RESERVE frames free */
        }
        uint32_t len = o->len[k];
        memcpy(fdata(n, i), o->buf + (size_t)k * o->slot_len, len);
        fmeta(n, i)->len = len;
        n->st.ctrl_frames++;
        if (o->plane[k] >= n->planes || route_and_queue(n, host, o->plane[k], i, t) < 0) {
            n->st.misrouted++; /* (every template's route is added when its QP connects) */
            free_frame(n, i);
        }
    }
    o->n = 0;
}

/* After an engine of `host` ran: arm its delayed-ACK timer here; what Python must look at
 * (MRC_SIM_WAKE_RX: the receive engine's events or a SACK Python must hear of;
 * MRC_SIM_WAKE_TX: the send engine's feedback), 0 for nothing. */
static int after_engine(struct mrc_simnet *n, uint32_t host, uint32_t e, double t) {
    struct mrc_simnet_host *h = &n->hosts[host];
    struct mrc_rxe_dev *d = h->dev;
    struct mrc_rxe_qp *q = d->qp[e];
    struct mrc_txe_qp *tq = d->txq[e];
    if (q->ack_armed && q->ack_deadline_s != h->ack_at[e]) {
        h->ack_at[e] = q->ack_deadline_s;
        push(n, q->ack_deadline_s > t ? q->ack_deadline_s : t, MRC_SIM_EV_ACK,
             (int32_t)(host * MRC_SIM_MAX_ENGINES + e));
    }
    int why = 0;
    if (q->n_events || (q->sacked && h->notify_sacked[e])) {
        why |= MRC_SIM_WAKE_RX;
    }
    if (tq != NULL && tq->n_fb) {
        why |= MRC_SIM_WAKE_TX;
    }
    return why;
}

static void bin_bytes(struct mrc_simnet *n, double t, int64_t placed) {
    if (placed <= 0 || n->bin_s <= 0.0) {
        return;
    }
    int64_t k = (int64_t)(t / n->bin_s);
    if (k < (int64_t)n->n_bins) {
        n->bins[k] += placed;
    } else { /* one frame per event: the loop hands it over before the next */
        n->late_k = k;
        n->late_bytes += placed;
    }
}

/* Frame i reached `host`, whose QPs run on the C engines. Returns 1 when it is handed to
 * Python (todo set), 0 when C took it. */
static int c_deliver(struct mrc_simnet *n, uint32_t host, int32_t i, double t,
                     struct mrc_simnet_todo *todo) {
    struct mrc_rxe_dev *d = n->hosts[host].dev;
    const uint8_t *f = fdata(n, i);
    struct mrc_simnet_frame *m = fmeta(n, i);
    uint32_t len = m->len;
    uint32_t e = d->n;
    if (len >= OFF_BTH + 8) {
        uint32_t qpn = (uint32_t)f[OFF_BTH + 5] << 16 | (uint32_t)f[OFF_BTH + 6] << 8 | f[OFF_BTH + 7];
        int32_t found = mrc_rxe_dev_find(d, qpn);
        e = found >= 0 ? (uint32_t)found : d->n;
    }
    int64_t placed = e < d->n ? d->qp[e]->st.rx_placed_bytes : 0;
    uint32_t off = 0;
    int8_t done = 0;
    int k = mrc_rxe_dispatch(d, f, &off, &len, 1, n->slot_len, t, &done);
    drain_out(n, host, d, t);
    int stopped = d->stopped;
    d->stopped = 0;
    if (k != 1 || done != 1 || stopped) { /* not taken: Python's per-frame path, in its place */
        n->st.py_frames++;
        *todo = (struct mrc_simnet_todo){MRC_SIM_DELIVER, (int32_t)host, m->port, i};
        n->pending_free = i;
        return 1;
    }
    n->st.c_frames++;
    free_frame(n, i);
    if (e >= d->n) {
        return 0;
    }
    bin_bytes(n, t, d->qp[e]->st.rx_placed_bytes - placed);
    int why = after_engine(n, host, e, t);
    if (why) {
        n->st.wakes++;
        *todo = (struct mrc_simnet_todo){MRC_SIM_WAKE, (int32_t)host, (int32_t)e, why};
        return 1;
    }
    return 0;
}

/* A C engine's delayed-ACK timer (the engine's part of QueuePair.handle_timer). */
static int ack_timer(struct mrc_simnet *n, int32_t a, double t, struct mrc_simnet_todo *todo) {
    uint32_t host = (uint32_t)a / MRC_SIM_MAX_ENGINES;
    uint32_t e = (uint32_t)a % MRC_SIM_MAX_ENGINES;
    struct mrc_simnet_host *h = &n->hosts[host];
    struct mrc_rxe_dev *d = h->dev;
    if (d == NULL || e >= d->n) {
        return 0;
    }
    struct mrc_rxe_qp *q = d->qp[e];
    h->ack_at[e] = -1.0;
    if (!q->ack_armed) {
        return 0;
    }
    if (q->ack_deadline_s <= t) {
        if (mrc_rxe_ack_timer(q, t, d->out) < 0) {
            drain_out(n, host, d, t);
            mrc_rxe_ack_timer(q, t, d->out);
        }
        drain_out(n, host, d, t);
    }
    int why = after_engine(n, host, e, t);
    if (why) {
        n->st.wakes++;
        *todo = (struct mrc_simnet_todo){MRC_SIM_WAKE, (int32_t)host, (int32_t)e, why};
        return 1;
    }
    return 0;
}

/* --- the loop: EventLoop.run ------------------------------------------------------------------- */

int mrc_simnet_run(struct mrc_simnet *n, double until, struct mrc_simnet_todo *todo) {
    if (n->pending_free >= 0) {
        free_frame(n, n->pending_free);
        n->pending_free = -1;
    }
    if (n->late_k >= 0) { /* (placed by the event that also woke Python last time) */
        *todo = (struct mrc_simnet_todo){MRC_SIM_BINS, 0, 0, -1};
        return MRC_SIM_BINS;
    }
    while (n->heap_n) {
        if (n->heap[0].t > until) {
            break;
        }
        int r = room(n);
        if (r < 0) {
            return r;
        }
        struct mrc_simnet_event ev = pop(n);
        n->now = ev.t;
        n->st.events++;
        switch (ev.kind) {
        case MRC_SIM_EV_CALL:
            *todo = (struct mrc_simnet_todo){MRC_SIM_CALL, ev.a, 0, -1};
            return MRC_SIM_CALL;
        case MRC_SIM_EV_PORT: {
            uint32_t pi = (uint32_t)ev.a;
            if (serve(n, pi, ev.t) && n->hosts[n->ports[pi].host].gate_waiting) {
                *todo = (struct mrc_simnet_todo){MRC_SIM_GATE, (int32_t)n->ports[pi].host, 0, -1};
                return MRC_SIM_GATE;
            }
            break;
        }
        case MRC_SIM_EV_ACK:
            if (ack_timer(n, ev.a, ev.t, todo)) {
                return todo->kind;
            }
            break;
        case MRC_SIM_EV_FRAME: {
            int32_t i = ev.a;
            struct mrc_simnet_frame *m = fmeta(n, i);
            const struct mrc_simnet_route *rt = &n->routes[m->route];
            if (m->stage == rt->n) { /* delivered */
                uint32_t host = rt->dst;
                if (n->hosts[host].dev == NULL) {
                    n->st.py_frames++;
                    *todo = (struct mrc_simnet_todo){MRC_SIM_DELIVER, (int32_t)host, m->port, i};
                    n->pending_free = i;
                    return MRC_SIM_DELIVER;
                }
                if (c_deliver(n, host, i, ev.t, todo)) {
                    return todo->kind;
                }
                break;
            }
            double at = transmit(n, &n->links[rt->link[m->stage]], ev.t, i);
            if (at < 0.0) {
                free_frame(n, i);
                break;
            }
            m->stage++;
            push(n, at, MRC_SIM_EV_FRAME, i);
            break;
        }
        default:
            break;
        }
        if (n->late_k >= 0) {
            *todo = (struct mrc_simnet_todo){MRC_SIM_BINS, 0, 0, -1};
            return MRC_SIM_BINS;
        }
    }
    todo->kind = MRC_SIM_IDLE;
    return MRC_SIM_IDLE;
}

/* --- faults: EventLoop.cut -------------------------------------------------------------------- */

int64_t mrc_simnet_cut(struct mrc_simnet *n, const int32_t *links, uint32_t k) {
    for (uint32_t j = 0; j < k; j++) {
        if (links[j] < 0 || (uint32_t)links[j] >= n->n_links) {
            continue;
        }
        struct mrc_simnet_link *l = &n->links[links[j]];
        l->up = 0;
        l->cut = 1;
        if (l->busy_until > n->now) {
            l->busy_until = n->now;
        }
    }
    /* a frame on its way to stage s came off link s - 1: lost if that link was cut */
    uint32_t keep = 0;
    int64_t lost = 0;
    for (uint32_t j = 0; j < n->heap_n; j++) {
        struct mrc_simnet_event e = n->heap[j];
        if (e.kind == MRC_SIM_EV_FRAME) {
            struct mrc_simnet_frame *m = fmeta(n, e.a);
            if (m->stage > 0) {
                struct mrc_simnet_link *l = &n->links[n->routes[m->route].link[m->stage - 1]];
                if (l->cut) {
                    l->drops++;
                    lost++;
                    free_frame(n, e.a);
                    continue;
                }
            }
        }
        n->heap[keep++] = e;
    }
    for (uint32_t j = 0; j < k; j++) {
        if (links[j] >= 0 && (uint32_t)links[j] < n->n_links) {
            n->links[links[j]].cut = 0;
        }
    }
    if (lost) {
        n->heap_n = keep;
        for (uint32_t j = keep / 4 + 1; j-- > 0;) {
            if (j < keep) {
                sift_down(n->heap, keep, j);
            }
        }
    }
    return lost;
}
