#ifndef MRC_PACE_H
#define MRC_PACE_H
#include <stdint.h>
#include "mrc_txq.h"
/* The NIC's per-port pacers over their C queues, all ports in one call (the I/O shell's
 * pump, mrcnic/io/aio.py, calls it while no port holds a frame in its Python queues). Each
 * port is a token bucket at its link rate (the fields of mrcnic.io.pacing.PortPacer, which
 * is the twin: it keeps its bucket in this struct, so either side may serve a port) over
 * the C control queue, then the C data queue. The caller owns the memory. */

struct mrc_pace_port {
    double rate_Bps;    /* link rate, bytes per second */
    double burst_bytes; /* bucket depth */
    double tokens;      /* may go one frame negative: the average rate is exact */
    double last_s;      /* when the bucket was last refilled */
    struct mrc_txq *chq; /* C control frames (SACKs, NACKs); NULL: none */
    struct mrc_txq *cq;  /* C data frames; NULL: none */
    int32_t fd;          /* the port's send socket; < 0: it cannot send (frames are dropped) */
    int32_t up;          /* the shell's view of the link: only live ports hold the pull back */
    uint32_t max_data_frames; /* the longest the data queue was when served */
    uint32_t data_limit;      /* data frames the queue holds before the pull stops (room) */
    int32_t last_errno;       /* the last send error, 0 if none */
    /* counted by mrc_pace_serve since the port was set up (the shell's counters add them) */
    int64_t tx_frames;
    int64_t tx_bytes;
    int64_t tx_lost;       /* refused by the kernel (ENOBUFS from a tc/nft fault, ...) */
    int64_t tx_down_drops; /* dropped: no socket, or the port is down */
    int32_t netdown;       /* a send said the port is down (ENETDOWN, ENXIO, ENODEV) */
};

struct mrc_pace {
    struct mrc_pace_port *port;
    uint32_t n;
    uint32_t errs; /* sends refused or frames dropped since the shell last looked (it zeroes it) */
};

/* AioNic._data_room over the C data queues: 1 every live port's queue has room (below its
 * data_limit), 0 a live port's queue is full, -1 no live port. */
int mrc_pace_room(const struct mrc_pace *ps);

/* For every port holding frames: refill, let go what the tokens allow (control queue, then
 * data queue: PortPacer.take) and send it (mrc_txq_send), or drop it all when fd < 0; a
 * port whose control send found it down sends no data (the shell flushes it).
 * Returns how many ports still hold data frames (AioNic's blocking_len test). */
uint32_t mrc_pace_serve(struct mrc_pace *ps, double now_s);

/* When the pacers next want the loop (AioNic._pump's tail): the earliest port's due time
 * (PortPacer.next_due), where a port with only data waits at least until now_s + tick_s.
 * Returns 0 when no port holds a frame, else 1 with the time in *at. */
int mrc_pace_next(struct mrc_pace *ps, double now_s, double tick_s, double *at);
#endif
