#ifndef MRC_SIMNET_H
#define MRC_SIMNET_H
#include <stdint.h>
/* The simulator's fabric in C (docs/sim.md, Speed): the event queue, the links, the NICs'
 * ports and the routes of a whole Clos in virtual time. Its Python twin is
 * mrcnic/sim/fabric.py (EventLoop, Link, HostPort) with mrcnic/sim/clos.py's ClosFabric:
 * driven by the same frames, both play the same events in the same order (time, then the
 * order they were scheduled in) with the same arithmetic, and a run gives the same output
 * bytes on either (tests/unit/test_simnet.py). The shell is mrcnic/sim/cfabric.py.
 *
 * Beyond the twin: a host whose QPs run on the C engines (hosts[h].dev, the device's
 * struct mrc_rxe_dev) takes its frames in C (mrc_rxe_dispatch), and the SACKs and NACKs its
 * engines build go to its ports in C; Python is woken only when the engines leave it work
 * (feedback for the congestion control, events, a frame they did not take).
 *
 * Frames live in a pool of slots the caller adds in chunks (mrc_simnet_add_chunk); a frame
 * is its slot's index. The caller owns every array; nothing here allocates. */

struct mrc_rxe_dev;

enum {
    /* event kinds (struct mrc_simnet_event.kind) */
    MRC_SIM_EV_CALL = 0,  /* a = the caller's callback id */
    MRC_SIM_EV_FRAME = 1, /* a = frame: it reaches stage `stage` of its route */
    MRC_SIM_EV_PORT = 2,  /* a = port: the frame it serialised is out, serve the next */
    MRC_SIM_EV_ACK = 3,   /* a = host * 64 + engine: a C engine's delayed-ACK timer */
    /* what mrc_simnet_run hands back (struct mrc_simnet_todo.kind) */
    MRC_SIM_IDLE = 0,    /* no event due by `until` */
    MRC_SIM_CALL = 1,    /* a = callback id */
    MRC_SIM_DELIVER = 2, /* a = host, b = port, frame: for Python (freed by the next call) */
    MRC_SIM_GATE = 3,    /* a = host: a port drained below its limit and QPs wait at its gate */
    MRC_SIM_WAKE = 4,    /* a = host, b = engine, frame = why (MRC_SIM_WAKE_RX | _TX): its
                            C engines left work for Python */
    MRC_SIM_BINS = 5,    /* the timeline needs bin late_k: grow bins, add late_bytes there */
    MRC_SIM_WAKE_RX = 1, /* the receive engine's events, or a SACK Python must hear of */
    MRC_SIM_WAKE_TX = 2, /* the send engine's feedback */
    /* errors */
    MRC_SIM_NO_FRAME = -1, /* the pool is (nearly) empty: add a chunk and call again */
    MRC_SIM_NO_EVENT = -2, /* the event heap is (nearly) full: grow it and call again */
    MRC_SIM_NO_ROUTE = -3, /* mrc_simnet_send: no route for the frame's destination yet */
    MRC_SIM_BAD = -4,      /* an argument out of range */
    /* sizes */
    MRC_SIM_CHUNK_SHIFT = 12, /* 4096 frames per chunk */
    MRC_SIM_MAX_CHUNKS = 1024,
    MRC_SIM_MAX_ENGINES = 1024, /* per host: struct mrc_rxe_dev's (MRC_RXE_MAX_QPS) */
    MRC_SIM_RESERVE = 1024    /* free frames and heap entries kept for one event's work */
};

/* A fabric link: fabric.Link (an analytic FIFO: the queue is busy_until's backlog). */
struct mrc_simnet_link {
    double bytes_per_s;
    double prop_s;
    double busy_until;
    double loss;         /* random loss probability per packet */
    int64_t queue_bytes; /* < 0: unbounded */
    int64_t ecn_bytes;   /* < 0: never marks */
    uint8_t up;
    uint8_t trim;     /* trim trimmable data on overflow (else drop) */
    uint8_t last_hop; /* trims become TRIMMED_LASTHOP */
    uint8_t cut;      /* scratch of mrc_simnet_cut */
    int64_t tx_packets, drops, trims, marks, losses, max_backlog;
    int64_t tx_bytes; /* wire bytes it carried (a trimmed frame's header only) */
};

/* A NIC port: fabric.HostPort (two classes, control and trimmed headers first; never drops
 * while up). Port host * planes + plane. */
struct mrc_simnet_port {
    double bytes_per_s;
    uint32_t host;
    uint32_t data_limit; /* data frames at which the host's gate shuts */
    uint8_t up;
    uint8_t busy;
    int32_t high_head, high_tail, data_head, data_tail; /* frame lists, -1: empty */
    uint32_t n_high, n_data;
    int64_t backlog; /* bytes queued, not counting the frame in service */
    int64_t max_backlog, tx_packets, drops, max_data_frames;
};

/* Per frame slot: where it is, and its class read once from its headers when it entered
 * (a hop then touches 16 bytes, not the frame: at the paper's scale the frames in flight are
 * hundreds of megabytes, and reading each one's traffic class at every hop missed the cache). */
struct mrc_simnet_frame {
    uint32_t len;
    int32_t next;  /* the next frame in a port's list or the free list, -1: none */
    int32_t route;
    uint16_t stage; /* the route's link it reaches next (n: the host) */
    uint8_t port;   /* the plane it is delivered on */
    uint8_t flags;  /* MRC_SIM_F_*: its class */
};

enum {
    MRC_SIM_F_HIGH = 1,      /* control or a trimmed header: served first, never cut */
    MRC_SIM_F_ECT = 2,       /* ECN-capable: a queue above its threshold marks it CE */
    MRC_SIM_F_TRIMMABLE = 4  /* DSCP TRIMMABLE or TRIMMABLE_RETX */
};

/* Where a destination address leads: up to three links, then host dst. */
struct mrc_simnet_route {
    int32_t link[3];
    uint32_t n;
    uint32_t dst;
};

struct mrc_simnet_event {
    double t;
    uint64_t seq;
    int32_t kind;
    int32_t a;
};

struct mrc_simnet_host {
    struct mrc_rxe_dev *dev; /* NULL: its frames go to Python */
    uint32_t gate_full;      /* live ports whose data queue is at its limit */
    uint8_t gate_waiting;    /* QPs wait at its gate (the shell keeps this) */
    uint8_t notify_sacked[1024]; /* per engine: wake Python when it sends a SACK */
    double ack_at[1024];         /* per engine: the delayed-ACK timer armed here, or -1 */
};

struct mrc_simnet_todo {
    int32_t kind;
    int32_t a;
    int32_t b;
    int32_t frame; /* DELIVER: the frame; WAKE: why */
};

struct mrc_simnet_stats {
    int64_t events, c_frames, py_frames, wakes, ctrl_frames, misrouted;
};

struct mrc_simnet {
    double now;
    uint64_t seq;
    struct mrc_simnet_event *heap;
    uint32_t heap_n, heap_cap;
    struct mrc_simnet_link *links;
    uint32_t n_links;
    struct mrc_simnet_port *ports;
    uint32_t n_ports, planes;
    struct mrc_simnet_host *hosts;
    uint32_t n_hosts;
    /* routes, and an open-addressing table of destination addresses (16 bytes each) */
    struct mrc_simnet_route *routes;
    uint32_t n_routes, routes_cap;
    uint8_t *keys;   /* hash_cap * 16 bytes */
    int32_t *slots;  /* hash_cap entries: a route, -1: empty */
    uint32_t hash_cap; /* a power of two, at least twice routes_cap */
    /* the frame pool */
    uint8_t *chunk[1024];
    struct mrc_simnet_frame *meta[1024];
    uint32_t n_chunks;
    uint32_t slot_len;
    int32_t free_head;
    uint32_t n_free;
    int32_t pending_free; /* the frame last handed to Python, -1: none */
    /* random.Random of the fabric (link loss) */
    uint32_t mt[624];
    uint32_t mti;
    /* bytes the C engines placed, binned by time (bin_s > 0); a bin beyond n_bins waits in
     * late_k / late_bytes for the caller to grow bins (MRC_SIM_BINS) */
    int64_t *bins;
    uint32_t n_bins;
    double bin_s;
    int64_t late_k; /* -1: none */
    int64_t late_bytes;
    struct mrc_simnet_stats st;
};

/* Empty pool, heap and routes; links, ports and hosts as the caller set them. */
void mrc_simnet_reset(struct mrc_simnet *n);

/* Add a chunk of 4096 frame slots (data: 4096 * slot_len bytes; meta: 4096 entries).
 * Returns 0, or MRC_SIM_BAD when MRC_SIM_MAX_CHUNKS are in use. */
int mrc_simnet_add_chunk(struct mrc_simnet *n, uint8_t *data, struct mrc_simnet_frame *meta);

/* Move the heap to a bigger array (cap entries). Returns 0 or MRC_SIM_BAD (too small). */
int mrc_simnet_grow_heap(struct mrc_simnet *n, struct mrc_simnet_event *heap, uint32_t cap);

/* Schedule callback `id` at t (EventLoop.at). Returns 0 or MRC_SIM_NO_EVENT. */
int mrc_simnet_at(struct mrc_simnet *n, double t, int32_t id);

/* A route for destination address key (16 bytes): links[0 .. nlinks), then host dst.
 * Returns the route's index, MRC_SIM_BAD (no room, or a link or host out of range). */
int mrc_simnet_add_route(struct mrc_simnet *n, const uint8_t *key, const int32_t *links,
                         uint32_t nlinks, uint32_t dst);

/* Host `host` hands a frame to its port `plane` at t (ClosFabric.send): routed by its
 * destination address. Returns 0, 1 when the port's data queue drained below its limit on
 * the way (the caller runs its gate), MRC_SIM_NO_ROUTE (the caller adds the route, or counts
 * the frame misrouted, and calls again), MRC_SIM_NO_FRAME, MRC_SIM_NO_EVENT or MRC_SIM_BAD. */
int mrc_simnet_send(struct mrc_simnet *n, uint32_t host, uint32_t plane, const uint8_t *frame,
                    uint32_t len, double t);

/* Frames of an engine's output array (frame k at buf + k * slot_len, lens[k] bytes, on port
 * planes[k]) that `host` sends now, each as mrc_simnet_send (one with no route or port is
 * counted misrouted and dropped). Stops after a frame whose port's data queue drained below
 * its limit on the way, with *drained = 1 (the caller runs the host's gate, then sends the
 * rest). Returns how many frames it took (sent or dropped), or MRC_SIM_NO_FRAME /
 * MRC_SIM_NO_EVENT (nothing sent) when the pool or the heap has less room than `count`
 * frames may need. */
int mrc_simnet_send_many(struct mrc_simnet *n, uint32_t host, const uint8_t *buf,
                         uint32_t slot_len, const uint32_t *lens, const uint8_t *planes,
                         uint32_t count, int32_t *drained);

/* Play events in order until one needs Python (*todo says which), none is due by `until`
 * (MRC_SIM_IDLE), or the pool or heap needs more room (MRC_SIM_NO_FRAME, MRC_SIM_NO_EVENT:
 * nothing was played). Returns todo->kind or the error. */
int mrc_simnet_run(struct mrc_simnet *n, double until, struct mrc_simnet_todo *todo);

/* The bytes of frame i (and its length in *len). */
uint8_t *mrc_simnet_frame(struct mrc_simnet *n, int32_t i, uint32_t *len);

/* A port goes up or down (HostPort.set_up: down drops what it holds). Returns 1 when the
 * host's gate must run (a full data queue was flushed), else 0. */
int mrc_simnet_port_set_up(struct mrc_simnet *n, uint32_t port, int up);

/* Take links[0 .. k) down now and lose what they hold (EventLoop.cut). Returns how many
 * frames were lost. */
int64_t mrc_simnet_cut(struct mrc_simnet *n, const int32_t *links, uint32_t k);
#endif
