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
#define KEY_AT MRC_FCACHE_KEY_AT
#define CODE_AT MRC_FCACHE_CODE_AT

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
        if (memcmp(e + KEY_AT, key, KEY_LEN) == 0) {
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
        if (e[0] == 0 || memcmp(e + KEY_AT, key, KEY_LEN) == 0) {
            slot = e;
            break;
        }
    }
    slot[0] = 1;
    memcpy(slot + KEY_AT, key, KEY_LEN);
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

int mrc_fwd_wake(struct mrc_fwd_batch *b, const struct mrc_fwd_rx *rx, size_t head,
                 int64_t now_ns) {
    if (b == NULL || rx == NULL || !table_ok(rx->table, rx->table_len) || b->dec == NULL ||
        b->fds == NULL || b->sent == NULL || b->sent_ports == NULL || b->rate_per_ns == NULL ||
        b->burst == NULL || b->stamp_ns == NULL || b->budget == NULL || b->n_ports == 0 ||
        b->n_ports > MRC_FWD_MAX_PORTS || rx->slots > b->max_batch ||
        rx->slots > MRC_FWD_MAX_BATCH) {
        return -EINVAL;
    }
    uint8_t *ring = rx->buf;
    size_t ring_len = rx->buf_len;
    uint32_t *offs = rx->offs, *lens = rx->lens;
    int n = mrc_ring_collect(ring, ring_len, rx->block_size, rx->frame_size, rx->frame_nr, head,
                             rx->slots, offs, lens);
    if (n < 0) {
        return n;
    }
    struct mrc_fwd_result *res = &b->res;
    *res = (struct mrc_fwd_result){.n = n};
    if (n == 0) {
        return 0;
    }
    size_t entries = rx->table_len / MRC_FCACHE_ENTRY;
    int64_t misses = 0;
    for (size_t i = 0; i < (size_t)n; i++) {
        uint8_t key[KEY_LEN];
        size_t k = lens[i]; /* as mrc_fwd_keys: the first 54 bytes, zero-filled */
        if (k > rx->cap) {
            k = rx->cap;
        }
        if (k > ring_len - offs[i]) { /* collect keeps offs[i] <= ring_len */
            k = ring_len - offs[i];
        }
        if (k > KEY_LEN) {
            k = KEY_LEN;
        }
        memcpy(key, ring + offs[i], k);
        memset(key + k, 0, KEY_LEN - k);
        const uint8_t *e = find(rx->table, entries, key);
        if (e == NULL) {
            misses++;
        } else {
            memcpy(&b->dec[i], e + CODE_AT, 4);
        }
    }
    if (misses) {
        res->misses = misses;
        return n;
    }
    for (size_t p = 0; p < b->n_ports; p++) { /* the tokens earned since the budget was set */
        if (b->budget[p] >= 0 && now_ns > b->stamp_ns[p]) {
            double earned = (double)(now_ns - b->stamp_ns[p]) * b->rate_per_ns[p];
            double t = (double)b->budget[p] + earned;
            b->budget[p] = t < (double)b->burst[p] ? (int64_t)t : b->burst[p];
            b->stamp_ns[p] = now_ns;
        }
    }
    int n_defer = mrc_fwd_plan(b, rx, (size_t)n);
    if (n_defer < 0) {
        return n_defer;
    }
    int64_t n_sent_ports = 0;
    for (size_t p = 0; p < b->n_ports; p++) {
        uint32_t count = b->port_count[p];
        if (count == 0) {
            continue;
        }
        struct mrc_fwd_sent *out = &b->sent[p];
        if (b->fds[p] < 0) {
            *out = (struct mrc_fwd_sent){.failed = count, .err = EBADF};
        } else {
            int64_t io[3];
            int sent = mrc_io_send_iov(b->fds[p], ring, ring_len, offs, lens, (size_t)n,
                                       b->order + b->port_start[p], count, io);
            if (sent < 0) {
                return sent; /* cannot happen: plan's order[] is in range */
            }
            *out = (struct mrc_fwd_sent){.sent = sent, .failed = io[0], .err = io[1],
                                         .bytes = io[2]};
        }
        b->sent_ports[n_sent_ports++] = (uint32_t)p;
    }
    res->n_sent_ports = n_sent_ports;
    if (n_defer == 0) {
        mrc_ring_release(ring, ring_len, rx->block_size, rx->frame_size, rx->frame_nr, head,
                         (size_t)n);
        res->released = 1;
    }
    return n;
}
