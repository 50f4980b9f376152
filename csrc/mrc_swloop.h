#ifndef MRC_SWLOOP_H
#define MRC_SWLOOP_H
#include <stddef.h>
#include <stdint.h>

#include "mrc_fwd.h"
/* mrc-switch's event loop for the common case, in C: the Python loop of
 * mrcswitch/switch.py (Switch._run_python: epoll) with mrcswitch/datapath.py (DataPath.rx, DataPath.tx) is its twin.
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
    MRC_SW_OTHER_FD = 1,  /* ev.fd: a ready fd that is no port's rx_fd */
    MRC_SW_MISS = 2,      /* ev.port: ev.frames frames collected, a key not cached; nothing
                           * done with the batch (rx.offs/lens filled, head unchanged) */
    MRC_SW_PUNT = 3,      /* ev.port: batch of ev.frames frames done except the ev.n_punt
                           * frames listed first in fwd.defer[] (their decision does not fit
                           * them: Python decides them), then the caller releases all
                           * ev.frames frames from head on */
    MRC_SW_LINK_DOWN = 4, /* ev.port failed to send with errno ev.err: the loop set its
                           * up = 0, flushed its queue (counted PORT_DOWN) */
    MRC_SW_SOCK_ERR = 5,  /* ev.port's rx_fd reported EPOLLERR (nothing read) */
    MRC_SW_EINTR = 6,     /* a signal interrupted the wait */
    MRC_SW_PFC = 7        /* ev.port: its lossless bytes crossed XOFF (pfc_xoff 0) or fell
                           * to XON (pfc_xoff 1): Python sends the PFC frame and sets
                           * pfc_xoff[port] (else the loop reports it again) */
};

enum { MRC_SW_MAX_PORTS = 1024 };

/* Why mrc_sw_poll returned; a field that does not apply to ev.why is -1 (port, fd) or 0. */
struct mrc_sw_event {
    int32_t why;    /* MRC_SW_* */
    int32_t port;   /* MISS, PUNT, LINK_DOWN, SOCK_ERR: the port's index */
    int32_t fd;     /* OTHER_FD: the ready fd */
    int32_t err;    /* LINK_DOWN: errno of the failed send */
    int64_t frames; /* MISS, PUNT: frames collected in the batch */
    int64_t n_punt; /* PUNT: refused frames, listed first in fwd.defer[] */
    int32_t sw;     /* mrc_sw_group_poll: the switch (index in group.sw) of port; else 0 */
    int32_t spare;
};

struct mrc_sw_port {
    struct mrc_fwd_rx rx; /* receive: the port's PACKET_MMAP ring, its collect arrays
                           * (rx.slots entries, <= fwd.max_batch) and decision cache */
    size_t head;          /* next ring slot to read: in/out */
    int32_t rx_fd;        /* registered in epfd with data.fd = rx_fd; -1: none */
    int32_t tx_fd;        /* sends; -1: none */
    int32_t up;           /* 0: frames to it are dropped (PORT_DOWN), its queue not served */
    int32_t spare;
    struct mrc_equeue *q; /* its egress queue (mrc_equeue.h) */
    int64_t *drops;       /* fwd.hist_len counters by drop reason (in/out) */
    /* what the loop did (in/out: the caller reads and zeroes them) */
    int64_t rx_packets;
    int64_t rx_bytes;
    int64_t tx_packets;
    int64_t tx_bytes;
};

struct mrc_sw {
    int32_t epfd;
    uint32_t n_ports; /* 1..MRC_SW_MAX_PORTS */
    struct mrc_sw_port *ports;
    uint32_t batches_per_wake; /* rx batches per port per ready event (>= 1) */
    int32_t reason_port_down;  /* drop reason numbers (pipeline.DropReason) */
    int32_t reason_queue_full;
    int32_t reason_tx_error;
    int64_t timer_slack_ns; /* a paced send may be this late (fewer, fuller wake-ups) */
    int64_t hold_ns;        /* mrc_sw_poll: as struct mrc_sw_group's hold_ns (0: off) */
    /* mrc_fwd_wake's scratch and out-ports (n_ports of them); the loop sets its budget,
     * stamp_ns and fds from the queues, and hist to the in-port's drops, for each batch */
    struct mrc_fwd_batch fwd;
    /* counters (in/out) */
    int64_t wakeups;       /* epoll waits that returned events */
    int64_t timer_wakeups; /* waits that ended by timeout */
    int64_t holds;         /* mrc_sw_poll: sleeps of hold_ns */
    int32_t wait_ms_only;  /* set by the loop: no epoll_pwait2 here (ENOSYS), epoll_wait in ms */
    int32_t spare;
    int64_t port_wakeups;  /* waits that found one of its ports ready (in a group: its share) */
    int64_t wake_stamp;    /* the loop's: the group wait that last counted port_wakeups */
    /* priority flow control (NULL: none): per port, the lossless bytes that came in on it
     * and sit in any of the switch's queues (the queues' shared in_bytes), and whether its
     * upstream is asked to pause (Python's state; the loop only reads it) */
    int64_t *pfc_in_bytes;
    int32_t *pfc_xoff;
    int64_t pfc_xoff_bytes; /* above: report MRC_SW_PFC for a port with pfc_xoff 0 */
    int64_t pfc_xon_bytes;  /* at or below: report it for a port with pfc_xoff 1 */
};

/* Run until something needs Python (see MRC_SW_*); *ev says why (ev->why = the code).
 * Returns the code, or -EINVAL (bad arguments: nothing done), or -errno of a failed wait. */
int mrc_sw_poll(struct mrc_sw *sw, int64_t deadline_ns, struct mrc_sw_event *ev);

/* One process serving several switches (mrcswitch/host.py): every switch's ports in one
 * epoll set (epfd; each switch's own epfd is not used), one loop over all of them. A frame
 * that one switch sends to another switch of the group lands in that switch's ring during
 * the send (veth runs the receive in the sender's softirq), so the same wake-up forwards it
 * again: a frame crosses the group's switches on one wake-up instead of one per hop.
 * Each switch keeps its own ports, caches, queues, counters and budgets; ev->sw says which
 * switch a port event is about. The loop does exactly what mrc_sw_poll does for one switch
 * (mrc_sw_poll is this loop over a group of one), switch by switch in group order. */
enum { MRC_SW_MAX_GROUP = 4096 };

struct mrc_sw_group {
    int32_t epfd;
    uint32_t n_sw;          /* 1..MRC_SW_MAX_GROUP */
    struct mrc_sw **sw;     /* n_sw switches, each valid as for mrc_sw_poll */
    int64_t timer_slack_ns; /* the group's (the switches' own are not used) */
    int64_t hold_ns;        /* after a wake-up by frames, wait this long before reading
                             * (bounded receive coalescing: more frames per wake-up, at most
                             * hold_ns of added latency per wake-up); 0: off */
    /* counters (in/out) */
    int64_t wakeups;       /* waits that returned events */
    int64_t timer_wakeups; /* waits that ended by timeout */
    int64_t holds;         /* wake-ups that waited hold_ns */
    int32_t wait_ms_only;  /* as in struct mrc_sw */
    int32_t spare;
};

/* As mrc_sw_poll, for every switch of the group; ev->sw names the switch of ev->port. */
int mrc_sw_group_poll(struct mrc_sw_group *g, int64_t deadline_ns, struct mrc_sw_event *ev);
#endif
