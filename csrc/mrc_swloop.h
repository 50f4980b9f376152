#ifndef MRC_SWLOOP_H
#define MRC_SWLOOP_H
#include <stddef.h>
#include <stdint.h>
/* mrc-switch's event loop for the common case, in C: the Python loop of
 * mrcswitch/switch.py (Switch._run_python: epoll, Switch._rx, Switch._tx) is its twin.
 * At a few thousand frames/s per switch nearly every frame is a wake-up of its own, and the
 * Python around each one costs far more than forwarding it. So mrc_sw_poll waits on the
 * switch's epoll set and, for as long as nothing needs Python, receives (mrc_fwd_wake with
 * each in-port's decision cache), forwards, queues (mrc_equeue) and sends paced frames.
 * It returns to Python for everything else: a deadline (stats, link probes), a decision
 * cache miss, a frame it cannot apply a decision to, a link that went down, a socket error,
 * a signal, or a ready fd that is not a port. It makes no decision of its own: decisions are
 * Python's (replayed from the caches), queueing is mrc_equeue's. No allocation.
 *
 * The caller owns every struct and array; ports[i] must stay valid while mrc_sw_poll runs.
 * Ring heads: the loop moves ports[i].head as it releases frames; the caller copies it to
 * and from its own ring object around each call. */

enum {
    MRC_SW_DEADLINE = 0,  /* deadline_ns reached */
    MRC_SW_OTHER_FD = 1,  /* out[1] = a ready fd that is no port's rx_fd */
    MRC_SW_MISS = 2,      /* port out[1]: out[2] frames collected, a key not cached; nothing
                           * done with the batch (offs/lens filled, head unchanged) */
    MRC_SW_PUNT = 3,      /* port out[1]: batch of out[2] frames done except the out[3]
                           * frames listed first in defer[] (their decision does not fit
                           * them: Python decides them), then the caller releases all
                           * out[2] frames from head on */
    MRC_SW_LINK_DOWN = 4, /* port out[1] failed to send with errno out[3]: the loop set its
                           * up = 0, flushed its queue (counted PORT_DOWN) */
    MRC_SW_SOCK_ERR = 5,  /* port out[1]'s rx_fd reported EPOLLERR (nothing read) */
    MRC_SW_EINTR = 6      /* a signal interrupted the wait */
};

struct mrc_sw_port {
    /* receive: the port's PACKET_MMAP ring (geometry as mrc_ring_collect) */
    uint8_t *ring;
    size_t ring_len;
    size_t block_size;
    size_t frame_size;
    size_t frame_nr;
    size_t head;    /* next ring slot to read: in/out */
    uint32_t *offs; /* collect arrays of sw->slots entries each */
    uint32_t *lens;
    const uint8_t *fcache; /* this in-port's decision cache (mrc_fcache.h) */
    size_t fcache_len;
    int32_t rx_fd; /* registered in epfd with data.fd = rx_fd; -1: none */
    int32_t tx_fd; /* sends; -1: none */
    int32_t up;    /* 0: frames to it are dropped (PORT_DOWN), its queue not served */
    int32_t spare;
    struct mrc_equeue *q; /* its egress queue (mrc_equeue.h) */
    int64_t *drops;       /* sw->hist_len counters by drop reason (in/out) */
    /* what the loop did (in/out: the caller reads and zeroes them) */
    int64_t rx_packets;
    int64_t rx_bytes;
    int64_t tx_packets;
    int64_t tx_bytes;
};

struct mrc_sw {
    int32_t epfd;
    uint32_t n_ports; /* 1..1024 */
    struct mrc_sw_port *ports;
    size_t slots;        /* frames per batch: <= every port's offs/lens, <= 65535 */
    size_t cap;          /* receive slot: frames longer were cut */
    uint32_t batches_per_wake; /* rx batches per port per ready event (>= 1) */
    int32_t reason_port_down;  /* drop reason numbers (pipeline.DropReason) */
    int32_t reason_queue_full;
    int32_t reason_tx_error;
    int64_t timer_slack_ns; /* a paced send may be this late (fewer, fuller wake-ups) */
    size_t hist_len;        /* entries of each port's drops */
    const uint8_t *l2;      /* 12 bytes per port: Ethernet dst + src */
    size_t block_bytes;
    /* per-batch scratch (as mrc_fwd_wake's arguments): slots entries */
    int32_t *dec;
    uint8_t *verdict;
    uint16_t *order;
    uint16_t *defer;
    /* n_ports entries */
    int64_t *budget;
    int64_t *port_bytes;
    uint32_t *port_count;
    uint32_t *port_start;
    int32_t *fds;
    int64_t *port_out; /* 4 * n_ports */
    int64_t *res;      /* MRC_WAKE_RES_LEN + n_ports */
    double *rate_per_ns;
    int64_t *burst;
    int64_t *stamp_ns;
    int64_t *totals; /* 2 */
    /* counters (in/out) */
    int64_t wakeups;       /* epoll waits that returned events */
    int64_t timer_wakeups; /* waits that ended by timeout */
    int32_t wait_ms_only;  /* set by the loop: no epoll_pwait2 here (ENOSYS), epoll_wait in ms */
    int32_t spare;
};

/* Run until something needs Python (see MRC_SW_*). out[0..3] as above (out[0] = the code).
 * Returns the code, or -EINVAL (bad arguments: nothing done). */
int mrc_sw_poll(struct mrc_sw *sw, int64_t deadline_ns, int64_t *out);
#endif
