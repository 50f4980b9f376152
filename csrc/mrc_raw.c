/* Raw AF_PACKET send and receive loops: the baseline of make bench-nic (see mrc_raw.h). */
#include "mrc_raw.h"

#include <errno.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define MRC_RAW_MAX_BATCH 256
#define MRC_RAW_MAX_SLOT 9216 /* bytes per recvmmsg slot: a jumbo frame */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int mrc_raw_send(const struct mrc_raw_cfg *cfg, struct mrc_raw_result *res) {
    if (cfg == NULL || res == NULL || cfg->frame == NULL || cfg->frame_len == 0 ||
        cfg->batch == 0 || cfg->batch > MRC_RAW_MAX_BATCH || cfg->duration_ns <= 0 ||
        !(cfg->rate_fps >= 0) || cfg->tick_ns < 0) {
        return -EINVAL;
    }
    memset(res, 0, sizeof(*res));
    struct mmsghdr msgs[MRC_RAW_MAX_BATCH];
    struct iovec iov;
    iov.iov_base = (void *)cfg->frame;
    iov.iov_len = cfg->frame_len;
    memset(msgs, 0, sizeof(msgs));
    for (uint32_t i = 0; i < cfg->batch; i++) {
        msgs[i].msg_hdr.msg_iov = &iov; /* every message is the same frame */
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int64_t t0 = now_ns();
    int64_t end = t0 + cfg->duration_ns;
    int64_t t = t0;
    int64_t offered = 0; /* paced: frames sent or refused */
    while (t < end) {
        uint32_t n = cfg->batch;
        if (cfg->rate_fps > 0) {
            int64_t due = (int64_t)((double)(t - t0) * cfg->rate_fps / 1e9) + 1 - offered;
            if (due <= 0) { /* sleep until the next frame is due, and at least a tick */
                int64_t at = t0 + (int64_t)((double)offered * 1e9 / cfg->rate_fps);
                if (at < t + cfg->tick_ns) {
                    at = t + cfg->tick_ns;
                }
                struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                t = now_ns();
                continue;
            }
            n = due < (int64_t)n ? (uint32_t)due : n;
        }
        int r = sendmmsg(cfg->fd, msgs, n, MSG_DONTWAIT);
        res->calls++;
        if (cfg->rate_fps > 0) {
            offered += r > 0 ? r : (r < 0 && errno != EINTR ? (int64_t)n : 0);
        }
        if (r > 0) {
            res->frames += r;
            res->bytes += (int64_t)r * cfg->frame_len;
        } else if (r < 0) {
            if (errno == ENETDOWN || errno == ENXIO || errno == ENODEV || errno == EBADF) {
                res->last_errno = errno;
                return -errno;
            }
            if (errno != EINTR) {
                res->errors++;
                res->last_errno = errno;
                if (errno == EAGAIN || errno == ENOBUFS) {
                    struct pollfd p = {.fd = cfg->fd, .events = POLLOUT};
                    poll(&p, 1, 1); /* the queue is full: wait for room, as a NIC would */
                }
            }
        }
        t = now_ns();
    }
    res->elapsed_ns = t - t0;
    return 0;
}

/* Both receivers count for duration_ns from their first frame (twice that with none). */
static int64_t recv_end(const struct mrc_raw_cfg *cfg, int64_t t0, int64_t first) {
    return first ? first + cfg->duration_ns : t0 + 2 * cfg->duration_ns;
}

static int recv_mmsg(const struct mrc_raw_cfg *cfg, struct mrc_raw_result *res) {
    static uint8_t slots[MRC_RAW_MAX_BATCH * MRC_RAW_MAX_SLOT];
    if (cfg->batch == 0 || cfg->batch > MRC_RAW_MAX_BATCH || cfg->slot_len == 0 ||
        cfg->slot_len > MRC_RAW_MAX_SLOT) {
        return -EINVAL;
    }
    struct mmsghdr msgs[MRC_RAW_MAX_BATCH];
    struct iovec iov[MRC_RAW_MAX_BATCH];
    memset(msgs, 0, sizeof(msgs));
    for (uint32_t i = 0; i < cfg->batch; i++) {
        iov[i].iov_base = slots + (size_t)i * cfg->slot_len;
        iov[i].iov_len = cfg->slot_len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int64_t t0 = now_ns();
    int64_t first = 0;
    int64_t t = t0;
    for (;;) {
        int64_t end = recv_end(cfg, t0, first);
        if (t >= end) {
            break;
        }
        int r = recvmmsg(cfg->fd, msgs, cfg->batch, MSG_DONTWAIT, NULL);
        if (r > 0) {
            if (!first) {
                first = now_ns();
            }
            res->frames += r;
            for (int i = 0; i < r; i++) {
                res->bytes += msgs[i].msg_len;
            }
        } else {
            struct pollfd p = {.fd = cfg->fd, .events = POLLIN | POLLERR};
            poll(&p, 1, (int)((end - t) / 1000000) + 1);
            res->calls++;
        }
        t = now_ns();
    }
    res->elapsed_ns = t - (first ? first : t0);
    return 0;
}

int mrc_raw_recv(const struct mrc_raw_cfg *cfg, struct mrc_raw_result *res) {
    if (cfg == NULL || res == NULL || cfg->duration_ns <= 0) {
        return -EINVAL;
    }
    if (cfg->block_nr == 0) {
        memset(res, 0, sizeof(*res));
        return recv_mmsg(cfg, res);
    }
    if (cfg->block_size < 4096 || cfg->block_size % 4096) {
        return -EINVAL;
    }
    memset(res, 0, sizeof(*res));
    int v = TPACKET_V3;
    if (setsockopt(cfg->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0) {
        return -errno;
    }
    struct tpacket_req3 req;
    memset(&req, 0, sizeof(req));
    req.tp_block_size = cfg->block_size;
    req.tp_block_nr = cfg->block_nr;
    req.tp_frame_size = 2048; /* only a hint in V3: frames are packed in a block */
    req.tp_frame_nr = (unsigned)((uint64_t)cfg->block_size * cfg->block_nr / 2048);
    req.tp_retire_blk_tov = 1; /* ms: a partly filled block is handed over this soon */
    if (setsockopt(cfg->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
        return -errno;
    }
    size_t map_len = (size_t)cfg->block_size * cfg->block_nr;
    uint8_t *ring = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, cfg->fd, 0);
    if (ring == MAP_FAILED) {
        return -errno;
    }
    uint32_t blk = 0;
    int64_t t0 = now_ns();
    int64_t first = 0;
    int64_t t = t0;
    for (;;) {
        int64_t end = recv_end(cfg, t0, first);
        if (t >= end) {
            break;
        }
        struct tpacket_block_desc *bd = (struct tpacket_block_desc *)(ring + (size_t)blk *
                                                                       cfg->block_size);
        if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
            struct pollfd p = {.fd = cfg->fd, .events = POLLIN | POLLERR};
            int wait_ms = (int)((end - t) / 1000000) + 1;
            poll(&p, 1, wait_ms);
            res->calls++;
            t = now_ns();
            continue;
        }
        uint32_t n = bd->hdr.bh1.num_pkts;
        uint32_t off = bd->hdr.bh1.offset_to_first_pkt;
        for (uint32_t i = 0; i < n && off < cfg->block_size; i++) {
            const struct tpacket3_hdr *h = (const struct tpacket3_hdr *)((const uint8_t *)bd +
                                                                         off);
            res->frames++;
            res->bytes += h->tp_snaplen;
            if (h->tp_next_offset == 0) {
                break;
            }
            off += h->tp_next_offset;
        }
        if (n && !first) {
            first = now_ns();
        }
        __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        blk = (blk + 1) % cfg->block_nr;
        t = now_ns();
    }
    struct tpacket_stats_v3 st;
    socklen_t sl = sizeof(st);
    if (getsockopt(cfg->fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl) == 0) {
        res->errors = st.tp_drops;
    }
    res->elapsed_ns = t - (first ? first : t0);
    munmap(ring, map_len);
    return 0;
}
