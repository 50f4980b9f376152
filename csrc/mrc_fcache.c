/* The switch's per-wake-up fast path (see mrc_fcache.h).
 *
 * At a few thousand frames/s per switch nearly every wake-up carries one or two frames, and
 * the Python around each C call (argument conversion, bookkeeping) costs more than the
 * forwarding itself. So the decisions Python made are memoised here too, keyed by exactly
 * the bytes of the pipeline's memo, and one call collects, decides (by lookup), applies,
 * sends and releases a batch; Python runs only for misses, deferred frames and counters. */
#include "mrc_fcache.h"

#include <errno.h>
#include <string.h>

#include "mrc_fwd.h"
#include "mrc_io.h"

#define KEY_LEN MRC_FWD_HDR_LEN
#define CODE_AT 56

static int table_ok(const uint8_t *table, size_t table_len) {
    size_t entries = table_len / MRC_FCACHE_ENTRY;
    return table != NULL && entries > 0 && table_len % MRC_FCACHE_ENTRY == 0 &&
           (entries & (entries - 1)) == 0;
}

static uint32_t fnv1a(const uint8_t *key) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < KEY_LEN; i++) {
        h = (h ^ key[i]) * 16777619u;
    }
    return h;
}

/* the entry holding key, or NULL */
static const uint8_t *find(const uint8_t *table, size_t entries, const uint8_t *key) {
    size_t home = fnv1a(key) & (entries - 1);
    for (size_t j = 0; j < MRC_FCACHE_PROBES && j < entries; j++) {
        const uint8_t *e = table + ((home + j) & (entries - 1)) * MRC_FCACHE_ENTRY;
        if (e[0] == 0) {
            return NULL; /* entries are never removed: the key is not further on */
        }
        if (memcmp(e + 1, key, KEY_LEN) == 0) {
            return e;
        }
    }
    return NULL;
}

int mrc_fcache_insert(uint8_t *table, size_t table_len, const uint8_t *key, size_t key_len,
                      int32_t code) {
    if (key == NULL || key_len != KEY_LEN || !table_ok(table, table_len)) {
        return -EINVAL;
    }
    size_t entries = table_len / MRC_FCACHE_ENTRY;
    size_t home = fnv1a(key) & (entries - 1);
    uint8_t *slot = table + home * MRC_FCACHE_ENTRY; /* evicted when the window is full */
    for (size_t j = 0; j < MRC_FCACHE_PROBES && j < entries; j++) {
        uint8_t *e = table + ((home + j) & (entries - 1)) * MRC_FCACHE_ENTRY;
        if (e[0] == 0 || memcmp(e + 1, key, KEY_LEN) == 0) {
            slot = e;
            break;
        }
    }
    slot[0] = 1;
    memcpy(slot + 1, key, KEY_LEN);
    memcpy(slot + CODE_AT, &code, 4);
    return 0;
}

int mrc_fcache_lookup(const uint8_t *table, size_t table_len, const uint8_t *key, size_t key_len,
                      int32_t *code) {
    if (key == NULL || code == NULL || key_len != KEY_LEN || !table_ok(table, table_len)) {
        return -EINVAL;
    }
    const uint8_t *e = find(table, table_len / MRC_FCACHE_ENTRY, key);
    if (e == NULL) {
        return 0;
    }
    memcpy(code, e + CODE_AT, 4);
    return 1;
}

int mrc_fwd_wake(uint8_t *ring, size_t ring_len, size_t block_size, size_t frame_size,
                 size_t frame_nr, size_t head, size_t max, uint32_t *offs, uint32_t *lens,
                 size_t cap, const uint8_t *table, size_t table_len, int32_t *dec,
                 uint8_t *verdict, const uint8_t *l2, size_t l2_len, size_t block_bytes,
                 int64_t *budget, int64_t *port_bytes, uint32_t *port_count, uint32_t *port_start,
                 size_t n_ports, uint16_t *order, uint16_t *defer, int64_t *hist,
                 size_t hist_len, int64_t *totals, const int32_t *fds, int64_t *port_out,
                 int64_t *res, int64_t now_ns, const double *rate_per_ns,
                 const int64_t *burst, int64_t *stamp_ns) {
    if (!table_ok(table, table_len) || dec == NULL || fds == NULL || port_out == NULL ||
        res == NULL || rate_per_ns == NULL || burst == NULL || stamp_ns == NULL ||
        budget == NULL || n_ports == 0 || n_ports > 0x10000u || max > 0xFFFFu) {
        return -EINVAL;
    }
    int n = mrc_ring_collect(ring, ring_len, block_size, frame_size, frame_nr, head, max, offs,
                             lens);
    if (n < 0) {
        return n;
    }
    for (size_t k = 0; k < MRC_WAKE_RES_LEN; k++) {
        res[k] = 0;
    }
    res[0] = n;
    if (n == 0) {
        return 0;
    }
    size_t entries = table_len / MRC_FCACHE_ENTRY;
    int64_t misses = 0;
    for (size_t i = 0; i < (size_t)n; i++) {
        uint8_t key[KEY_LEN];
        size_t k = lens[i]; /* as mrc_fwd_keys: the first 54 bytes, zero-filled */
        if (k > cap) {
            k = cap;
        }
        if (k > ring_len - offs[i]) { /* collect keeps offs[i] <= ring_len */
            k = ring_len - offs[i];
        }
        if (k > KEY_LEN) {
            k = KEY_LEN;
        }
        memcpy(key, ring + offs[i], k);
        memset(key + k, 0, KEY_LEN - k);
        const uint8_t *e = find(table, entries, key);
        if (e == NULL) {
            misses++;
        } else {
            memcpy(&dec[i], e + CODE_AT, 4);
        }
    }
    if (misses) {
        res[1] = misses;
        return n;
    }
    for (size_t p = 0; p < n_ports; p++) { /* the tokens earned since the budget was set */
        if (budget[p] >= 0 && now_ns > stamp_ns[p]) {
            double t = (double)budget[p] + (double)(now_ns - stamp_ns[p]) * rate_per_ns[p];
            budget[p] = t < (double)burst[p] ? (int64_t)t : burst[p];
            stamp_ns[p] = now_ns;
        }
    }
    int n_defer = mrc_fwd_plan(ring, ring_len, offs, lens, cap, dec, verdict, (size_t)n, l2,
                               l2_len, block_bytes, budget, port_bytes, port_count, port_start,
                               n_ports, order, defer, hist, hist_len, totals);
    if (n_defer < 0) {
        return n_defer;
    }
    res[2] = n_defer;
    int64_t n_sent_ports = 0;
    for (size_t p = 0; p < n_ports; p++) {
        if (port_count[p] == 0) {
            continue;
        }
        int64_t *out = port_out + 4 * p;
        if (fds[p] < 0) {
            out[0] = 0;
            out[1] = port_count[p];
            out[2] = EBADF;
            out[3] = 0;
        } else {
            int64_t io[3];
            int sent = mrc_io_send_iov(fds[p], ring, ring_len, offs, lens, (size_t)n,
                                       order + port_start[p], port_count[p], io);
            if (sent < 0) {
                return sent; /* cannot happen: plan's order[] is in range */
            }
            out[0] = sent;
            out[1] = io[0];
            out[2] = io[1];
            out[3] = io[2];
        }
        res[MRC_WAKE_RES_LEN + n_sent_ports++] = (int64_t)p;
    }
    res[4] = n_sent_ports;
    if (n_defer == 0) {
        mrc_ring_release(ring, ring_len, block_size, frame_size, frame_nr, head, (size_t)n);
        res[3] = 1;
    }
    return n;
}
