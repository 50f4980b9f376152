/* A port's queue of C-built data frames (see mrc_txq.h). */
#include "mrc_txq.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

enum { TXQ_BATCH = 256 };

uint32_t mrc_txq_take(const struct mrc_txq *q, double *tokens) {
    double t = *tokens;
    uint32_t k = 0;
    while (t > 0 && k < q->n) {
        t -= q->len[(q->head + k) % q->cap];
        k++;
    }
    *tokens = t;
    return k;
}

static void pop(struct mrc_txq *q, uint32_t k) {
    for (uint32_t j = 0; j < k; j++) {
        q->bytes -= q->len[(q->head + j) % q->cap];
    }
    q->head = (q->head + k) % q->cap;
    q->n -= k;
}

int mrc_txq_send(struct mrc_txq *q, int fd, uint32_t n, struct mrc_txq_sent *res) {
    memset(res, 0, sizeof(*res));
    if (n > q->n) {
        return -EINVAL;
    }
    struct mmsghdr msgs[TXQ_BATCH];
    struct iovec iov[TXQ_BATCH];
    while (n > 0) {
        uint32_t k = n < TXQ_BATCH ? n : TXQ_BATCH;
        memset(msgs, 0, sizeof(msgs[0]) * k);
        for (uint32_t j = 0; j < k; j++) {
            uint32_t s = (q->head + j) % q->cap;
            iov[j].iov_base = q->buf + (size_t)s * q->slot_len;
            iov[j].iov_len = q->len[s];
            msgs[j].msg_hdr.msg_iov = &iov[j];
            msgs[j].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(fd, msgs, k, MSG_DONTWAIT);
        if (r > 0) {
            for (int j = 0; j < r; j++) {
                res->bytes += q->len[(q->head + (uint32_t)j) % q->cap];
            }
            res->sent += r;
            pop(q, (uint32_t)r);
            n -= (uint32_t)r;
            continue;
        }
        int e = r < 0 ? errno : EIO;
        if (e == EINTR) {
            continue;
        }
        res->err = e;
        if (e == ENETDOWN || e == ENXIO || e == ENODEV) {
            res->down = 1;
            res->failed += n;
            pop(q, n);
            break;
        }
        res->failed += 1; /* this frame was refused: the transport repairs it */
        pop(q, 1);
        n -= 1;
    }
    return 0;
}

uint32_t mrc_txq_push_many(struct mrc_txq *ports, uint32_t n_ports, const uint8_t *buf,
                           uint32_t slot_len, const uint32_t *lens, const uint8_t *planes,
                           uint32_t n) {
    uint32_t moved = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (planes[i] >= n_ports) {
            continue;
        }
        struct mrc_txq *q = &ports[planes[i]];
        uint32_t len = lens[i];
        if (q->n >= q->cap || len > q->slot_len || len > slot_len) {
            q->drops++;
            continue;
        }
        uint32_t s = (q->head + q->n) % q->cap;
        memcpy(q->buf + (size_t)s * q->slot_len, buf + (size_t)i * slot_len, len);
        q->len[s] = len;
        q->n++;
        q->bytes += len;
        moved++;
    }
    return moved;
}

uint32_t mrc_txq_clear(struct mrc_txq *q) {
    uint32_t n = q->n;
    q->head = 0;
    q->n = 0;
    q->bytes = 0;
    return n;
}
