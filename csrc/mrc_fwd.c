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

#define OFF_PLEN 18
#define OFF_HOP 21
#define OFF_DST 38
#define MAX_BATCH 65535u /* indices are uint16_t */

int mrc_fwd_keys(const uint8_t *buf, size_t buf_len, const uint32_t *offs, const uint32_t *lens,
                 size_t cap, size_t n, uint8_t *keys, size_t keys_len) {
    if ((n > 0 && (buf == NULL || offs == NULL || lens == NULL || keys == NULL)) ||
        n > MAX_BATCH || keys_len / MRC_FWD_HDR_LEN < n) {
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (offs[i] > buf_len) {
            return -EINVAL;
        }
    }
    for (size_t i = 0; i < n; i++) {
        size_t avail = buf_len - offs[i];
        size_t k = lens[i];
        if (k > cap) {
            k = cap;
        }
        if (k > avail) {
            k = avail;
        }
        if (k > MRC_FWD_HDR_LEN) {
            k = MRC_FWD_HDR_LEN;
        }
        uint8_t *key = keys + i * MRC_FWD_HDR_LEN;
        memcpy(key, buf + offs[i], k);
        memset(key + k, 0, MRC_FWD_HDR_LEN - k);
    }
    return 0;
}

/* The verdict for frame i, with the in-place rewrite of a forward (nothing else written). */
static uint8_t apply_one(uint8_t *buf, size_t buf_len, const uint32_t *offs, uint32_t *lens,
                         size_t cap, int32_t d, size_t i, const uint8_t *l2, size_t block_bytes,
                         size_t n_ports, size_t hist_len, int64_t *budget, int64_t *port_bytes) {
    size_t off = offs[i], len = lens[i];
    if (len < MRC_FWD_HDR_LEN || len > cap || off > buf_len || len > buf_len - off) {
        return MRC_FWD_REFUSED;
    }
    uint8_t *f = buf + off;
    size_t need = MRC_FWD_HDR_LEN + ((size_t)f[OFF_PLEN] << 8 | f[OFF_PLEN + 1]);
    if (need > len) {
        return MRC_FWD_REFUSED;
    }
    if (d < 0) {
        int64_t reason = -(int64_t)d;
        return ((uint64_t)reason < hist_len) ? MRC_FWD_DROP : MRC_FWD_REFUSED;
    }
    size_t port = (size_t)d & 0xFFFFu;
    size_t shift_bytes = 2 * ((size_t)d >> 16);
    size_t tail = 16 - block_bytes; /* destination bytes after the locator block */
    if (port >= n_ports || shift_bytes > tail || f[OFF_HOP] <= 1) {
        return MRC_FWD_REFUSED;
    }
    f[OFF_HOP] -= 1;
    if (shift_bytes) {
        uint8_t *after = f + OFF_DST + block_bytes;
        memmove(after, after + shift_bytes, tail - shift_bytes);
        memset(after + tail - shift_bytes, 0, shift_bytes);
    }
    memcpy(f, l2 + 12 * port, 12);
    lens[i] = (uint32_t)need; /* ipv6_rcv cuts what follows the payload */
    if (budget[port] >= (int64_t)need) {
        budget[port] -= (int64_t)need;
        port_bytes[port] += (int64_t)need;
        return MRC_FWD_SEND;
    }
    budget[port] = -1; /* everything after this frame queues behind it */
    return MRC_FWD_QUEUE;
}

int mrc_fwd_plan(uint8_t *buf, size_t buf_len, const uint32_t *offs, uint32_t *lens, size_t cap,
                 const int32_t *dec, uint8_t *verdict, size_t n, const uint8_t *l2, size_t l2_len,
                 size_t block_bytes, int64_t *budget, int64_t *port_bytes, uint32_t *port_count,
                 uint32_t *port_start, size_t n_ports, uint16_t *order, uint16_t *defer,
                 int64_t *hist, size_t hist_len, int64_t *totals) {
    if (n > MAX_BATCH || n_ports == 0 || n_ports > 0x10000u || block_bytes < 1 ||
        block_bytes > 14 || l2 == NULL || l2_len / 12 < n_ports || budget == NULL ||
        port_bytes == NULL || port_count == NULL || port_start == NULL || hist == NULL ||
        hist_len == 0 || totals == NULL) {
        return -EINVAL;
    }
    if (n > 0 && (buf == NULL || offs == NULL || lens == NULL || dec == NULL ||
                  verdict == NULL || order == NULL || defer == NULL)) {
        return -EINVAL;
    }
    for (size_t p = 0; p < n_ports; p++) {
        port_bytes[p] = 0;
        port_count[p] = 0;
    }
    int64_t rx_bytes = 0, drops = 0;
    size_t n_defer = 0;
    for (size_t i = 0; i < n; i++) {
        rx_bytes += lens[i];
        uint8_t v = apply_one(buf, buf_len, offs, lens, cap, dec[i], i, l2, block_bytes,
                              n_ports, hist_len, budget, port_bytes);
        verdict[i] = v;
        if (v == MRC_FWD_SEND) {
            port_count[(size_t)dec[i] & 0xFFFFu] += 1;
        } else if (v == MRC_FWD_DROP) {
            hist[-(int64_t)dec[i]] += 1;
            drops += 1;
        } else {
            defer[n_defer++] = (uint16_t)i;
        }
    }
    /* counting sort of the SENT frames by port, keeping arrival order within a port */
    uint32_t start = 0;
    for (size_t p = 0; p < n_ports; p++) {
        port_start[p] = start;
        start += port_count[p];
    }
    for (size_t i = 0; i < n; i++) {
        if (verdict[i] == MRC_FWD_SEND) {
            order[port_start[(size_t)dec[i] & 0xFFFFu]++] = (uint16_t)i;
        }
    }
    for (size_t p = 0; p < n_ports; p++) {
        port_start[p] -= port_count[p];
    }
    totals[0] = rx_bytes;
    totals[1] = drops;
    return (int)n_defer;
}
