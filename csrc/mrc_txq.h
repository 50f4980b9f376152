#ifndef MRC_TXQ_H
#define MRC_TXQ_H
#include <stdint.h>
/* A port's queue of data frames built in C (the send engine writes them here, the pacer lets
 * them go): a ring of `cap` slots of `slot_len` bytes each, frame i of the queue in slot
 * (head + i) % cap, len[...] bytes. The I/O shell's PortPacer owns one per port next to its
 * Python queues (mrcnic/io/pacing.py); frames leave with sendmmsg straight from the slots, so
 * no Python object is made per data frame. The caller owns the memory. */

struct mrc_txq {
    uint8_t *buf;
    uint32_t *len;
    uint32_t slot_len;
    uint32_t cap;
    uint32_t head;
    uint32_t n;
    uint64_t bytes; /* queued */
    uint64_t drops; /* frames mrc_txq_push_many found no room for */
};

struct mrc_txq_sent {
    int64_t sent;   /* frames the kernel took */
    int64_t failed; /* frames refused (ENOBUFS from a tc/nft fault, ...) or not sent (port down) */
    int64_t bytes;  /* bytes of the frames sent */
    int32_t err;    /* the last errno, 0 if none */
    int32_t down;   /* 1: err says the port is down (ENETDOWN, ENXIO, ENODEV: the rest failed) */
};

/* The pacer's rule over the queue: while *tokens > 0 and frames are left, one more frame
 * goes (its length taken from *tokens). Returns how many of the first frames go. */
uint32_t mrc_txq_take(const struct mrc_txq *q, double *tokens);

/* Send the first n frames with sendmmsg (MSG_DONTWAIT) and drop them from the queue, sent or
 * refused (errors as mrc_io_send_batch: a refused frame is counted and skipped; ENETDOWN,
 * ENXIO, ENODEV fail the rest). Returns 0, or -EINVAL when n is more than the queue holds. */
int mrc_txq_send(struct mrc_txq *q, int fd, uint32_t n, struct mrc_txq_sent *res);

/* Copy n frames (frame i at buf + i * slot_len, lens[i] bytes, for port planes[i]) to the
 * end of their ports' queues (ports[planes[i]], n_ports of them); a frame that finds its
 * queue full, too long for a slot, or a port out of range is dropped and counted in that
 * queue's drops (or not at all for a bad port). Returns how many were queued. */
uint32_t mrc_txq_push_many(struct mrc_txq *ports, uint32_t n_ports, const uint8_t *buf,
                           uint32_t slot_len, const uint32_t *lens, const uint8_t *planes,
                           uint32_t n);

/* Drop everything queued (the port went down); returns how many frames. */
uint32_t mrc_txq_clear(struct mrc_txq *q);
#endif
