/* Per-batch forwarding mechanics for mrc-switch: the decisions stay in Python.
 *
 * A Python loop that copies, rewrites and queues each frame costs about a microsecond per
 * frame, more than the forwarding budget. Python therefore decides per frame (a dict lookup
 * of the pipeline's memoised decision, keyed by the 54 header bytes this file copies out)
 * and this file applies the decisions to the whole batch in place, in the receive buffer,
 * and lays out which frames each port may send at once (mrc_io_send_iov sends them from
 * there). Everything is bounds-checked: a decision that does not fit its frame is refused
 * and goes back to Python's full pipeline, which decides again from the bytes. */
#include "mrc_fwd.h"

#include <errno.h>
#include <string.h>

#define PORT_OF(d) ((size_t)(d) & (MRC_FWD_MAX_PORTS - 1u))

static int rx_ok(const struct mrc_fwd_rx *rx, size_t n) {
    return rx != NULL && rx->slots <= MRC_FWD_MAX_BATCH && n <= rx->slots &&
           (n == 0 || (rx->buf != NULL && rx->offs != NULL && rx->lens != NULL));
}

int mrc_fwd_keys(const struct mrc_fwd_rx *rx, size_t n, uint8_t *keys, size_t keys_len) {
    if (!rx_ok(rx, n) || (n > 0 && keys == NULL) || keys_len / MRC_FWD_HDR_LEN < n) {
        return -EINVAL;
    }
    const uint32_t *offs = rx->offs, *lens = rx->lens;
    size_t buf_len = rx->buf_len;
    for (size_t i = 0; i < n; i++) {
        if (offs[i] > buf_len) {
            return -EINVAL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        size_t avail = buf_len - offs[i];
        size_t k = lens[i];
        if (k > rx->cap) {
            k = rx->cap;
        }
        if (k > avail) {
            k = avail;
        }
        if (k > MRC_FWD_HDR_LEN) {
            k = MRC_FWD_HDR_LEN;
        }
        uint8_t *key = keys + i * MRC_FWD_HDR_LEN;
        memcpy(key, rx->buf + offs[i], k);
        memset(key + k, 0, MRC_FWD_HDR_LEN - k);
    }
    return 0;
}

/* The verdict for frame i, with the in-place rewrite of a forward (nothing else written). */
static uint8_t apply_one(struct mrc_fwd_batch *b, const struct mrc_fwd_rx *rx, int32_t d,
                         size_t i) {
    size_t off = rx->offs[i], len = rx->lens[i];
    if (len < MRC_FWD_HDR_LEN || len > rx->cap || off > rx->buf_len ||
        len > rx->buf_len - off) {
        return MRC_FWD_REFUSED;
    }
    uint8_t *f = rx->buf + off;
    size_t need = MRC_FWD_HDR_LEN + ((size_t)f[MRC_FWD_OFF_PLEN] << 8 | f[MRC_FWD_OFF_PLEN + 1]);
    if (need > len) {
        return MRC_FWD_REFUSED;
    }
    if (d < 0) {
        int64_t reason = -(int64_t)d;
        return ((uint64_t)reason < b->hist_len) ? MRC_FWD_DROP : MRC_FWD_REFUSED;
    }
    size_t port = PORT_OF(d);
    size_t shift_bytes = 2 * ((size_t)d >> MRC_FWD_SHIFT_BITS);
    size_t tail = 16 - b->block_bytes; /* destination bytes after the locator block */
    if (port >= b->n_ports || shift_bytes > tail || f[MRC_FWD_OFF_HOP] <= 1) {
        return MRC_FWD_REFUSED;
    }
    f[MRC_FWD_OFF_HOP] -= 1;
    if (shift_bytes) {
        uint8_t *after = f + MRC_FWD_OFF_DST + b->block_bytes;
        memmove(after, after + shift_bytes, tail - shift_bytes);
        memset(after + tail - shift_bytes, 0, shift_bytes);
    }
    memcpy(f, b->l2 + MRC_FWD_L2_LEN * port, MRC_FWD_L2_LEN);
    rx->lens[i] = (uint32_t)need; /* ipv6_rcv cuts what follows the payload */
    if (b->budget[port] >= (int64_t)need) {
        b->budget[port] -= (int64_t)need;
        b->port_bytes[port] += (int64_t)need;
        return MRC_FWD_SEND;
    }
    b->budget[port] = -1; /* everything after this frame queues behind it */
    return MRC_FWD_QUEUE;
}

static int batch_ok(const struct mrc_fwd_batch *b, size_t n) {
    return b != NULL && n <= b->max_batch && b->max_batch <= MRC_FWD_MAX_BATCH &&
           b->n_ports > 0 && b->n_ports <= MRC_FWD_MAX_PORTS && b->block_bytes >= 1 &&
           b->block_bytes <= 14 && b->l2 != NULL && b->l2_len / MRC_FWD_L2_LEN >= b->n_ports &&
           b->budget != NULL && b->port_bytes != NULL && b->port_count != NULL &&
           b->port_start != NULL && b->hist != NULL && b->hist_len > 0 &&
           (n == 0 || (b->dec != NULL && b->verdict != NULL && b->order != NULL &&
                       b->defer != NULL));
}

int mrc_fwd_plan(struct mrc_fwd_batch *b, const struct mrc_fwd_rx *rx, size_t n) {
    if (!batch_ok(b, n) || !rx_ok(rx, n)) {
        return -EINVAL;
    }
    size_t n_ports = b->n_ports;
    const int32_t *dec = b->dec;
    uint32_t *port_count = b->port_count, *port_start = b->port_start;
    for (size_t p = 0; p < n_ports; p++) {
        b->port_bytes[p] = 0;
        port_count[p] = 0;
    }
    int64_t rx_bytes = 0, drops = 0;
    size_t n_defer = 0;
    for (size_t i = 0; i < n; i++) {
        rx_bytes += rx->lens[i];
        uint8_t v = apply_one(b, rx, dec[i], i);
        b->verdict[i] = v;
        if (v == MRC_FWD_SEND) {
            port_count[PORT_OF(dec[i])] += 1;
        } else if (v == MRC_FWD_DROP) {
            b->hist[-(int64_t)dec[i]] += 1;
            drops += 1;
        } else {
            b->defer[n_defer++] = (uint16_t)i;
        }
    }
    /* counting sort of the SENT frames by port, keeping arrival order within a port */
    uint32_t start = 0;
    for (size_t p = 0; p < n_ports; p++) {
        port_start[p] = start;
        start += port_count[p];
    }
    for (size_t i = 0; i < n; i++) {
        if (b->verdict[i] == MRC_FWD_SEND) {
            b->order[port_start[PORT_OF(dec[i])]++] = (uint16_t)i;
        }
    }
    for (size_t p = 0; p < n_ports; p++) {
        port_start[p] -= port_count[p];
    }
    struct mrc_fwd_result *res = &b->res;
    res->n = (int64_t)n;
    res->misses = 0;
    res->n_defer = (int64_t)n_defer;
    res->released = 0;
    res->n_sent_ports = 0;
    res->rx_bytes = rx_bytes;
    res->drops = drops;
    return (int)n_defer;
}
