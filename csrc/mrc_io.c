/* Batched datagram I/O: one recvmmsg/sendmmsg system call per batch instead of one per frame.
 *
 * The switch owns one AF_PACKET socket per port; a Python loop around recv/send costs about
 * a microsecond per frame in system-call overhead alone, which is most of the forwarding
 * budget. Both functions work on any datagram socket (the unit tests use AF_UNIX pairs). */
#include "mrc_io.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define MRC_IO_MAX_BATCH 256

/* After a sendmmsg that sent nothing (r <= 0) with `left` frames to go: how many of them
 * are lost, its errno in *err. 0: interrupted, try again; all of them: the link is gone;
 * else only the first (ENOBUFS, EAGAIN, EMSGSIZE, ...): skip it, the rest still go. */
static size_t send_lost(int r, size_t left, int *err) {
    int e = (r < 0) ? errno : EIO;
    if (e == EINTR) {
        return 0;
    }
    *err = e;
    return (e == ENETDOWN || e == ENXIO || e == ENODEV) ? left : 1;
}

/* Receive up to max_frames frames without blocking; frame i is written at ring + i*slot_len
 * and its length at lens[i]. A frame longer than slot_len is cut to it and its length reported
 * as its real length (> slot_len), so the caller can tell and drop it.
 * Returns the number of frames (0 when none is waiting), or -errno (e.g. -ENETDOWN after the
 * link went down; the socket reports such an error once), or -EINVAL for bad arguments. */
int mrc_io_recv_batch(int fd, uint8_t *ring, size_t ring_len, size_t slot_len, uint32_t *lens,
                      size_t max_frames) {
    if (ring == NULL || lens == NULL || slot_len == 0 || slot_len > UINT32_MAX - 1 ||
        max_frames == 0) {
        return -EINVAL;
    }
    if (max_frames > MRC_IO_MAX_BATCH) {
        max_frames = MRC_IO_MAX_BATCH;
    }
    if (ring_len / slot_len < max_frames) {
        return -EINVAL;
    }
    struct mmsghdr msgs[MRC_IO_MAX_BATCH];
    struct iovec iov[MRC_IO_MAX_BATCH];
    memset(msgs, 0, sizeof(msgs[0]) * max_frames);
    for (size_t i = 0; i < max_frames; i++) {
        iov[i].iov_base = ring + i * slot_len;
        iov[i].iov_len = slot_len;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int r = recvmmsg(fd, msgs, (unsigned int)max_frames, MSG_DONTWAIT | MSG_TRUNC, NULL);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            return 0;
        }
        return -errno;
    }
    for (int i = 0; i < r; i++) {
        uint32_t len = msgs[i].msg_len;
        if ((msgs[i].msg_hdr.msg_flags & MSG_TRUNC) && len <= slot_len) {
            len = (uint32_t)slot_len + 1; /* cut, real length unknown: still "too long" */
        }
        lens[i] = len;
    }
    return r;
}

/* Send n_frames frames laid back to back in buf (frame i has lens[i] bytes) without blocking.
 * A frame the kernel refuses is skipped (counted in err_out[0], its errno in err_out[1]) and
 * the rest still go; after ENETDOWN/ENXIO/ENODEV every remaining frame counts as failed.
 * Returns the number of frames sent, or -EINVAL when the lengths do not fit in buf. */
int mrc_io_send_batch(int fd, const uint8_t *buf, size_t buf_len, const uint32_t *lens,
                      size_t n_frames, int32_t *err_out) {
    if (err_out == NULL || (n_frames > 0 && (buf == NULL || lens == NULL))) {
        return -EINVAL;
    }
    err_out[0] = 0;
    err_out[1] = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_frames; i++) {
        total += lens[i];
        if (total > buf_len) {
            return -EINVAL;
        }
    }
    struct mmsghdr msgs[MRC_IO_MAX_BATCH];
    struct iovec iov[MRC_IO_MAX_BATCH];
    size_t i = 0, off = 0;
    int sent = 0;
    while (i < n_frames) {
        size_t k = n_frames - i;
        if (k > MRC_IO_MAX_BATCH) {
            k = MRC_IO_MAX_BATCH;
        }
        memset(msgs, 0, sizeof(msgs[0]) * k);
        size_t o = off;
        for (size_t j = 0; j < k; j++) {
            iov[j].iov_base = (void *)(buf + o);
            iov[j].iov_len = lens[i + j];
            o += lens[i + j];
            msgs[j].msg_hdr.msg_iov = &iov[j];
            msgs[j].msg_hdr.msg_iovlen = 1;
        }
        int r = sendmmsg(fd, msgs, (unsigned int)k, MSG_DONTWAIT);
        if (r > 0) {
            for (int j = 0; j < r; j++) {
                off += lens[i + (size_t)j];
            }
            i += (size_t)r;
            sent += r;
            continue;
        }
        int e = 0;
        size_t lost = send_lost(r, n_frames - i, &e);
        if (lost == 0) {
            continue;
        }
        err_out[1] = e;
        err_out[0] += (int32_t)lost;
        if (lost > 1) {
            break;
        }
        off += lens[i];
        i += 1;
    }
    return sent;
}

int mrc_io_send_iov(int fd, const uint8_t *buf, size_t buf_len, const uint32_t *offs,
                    const uint32_t *lens, size_t n_frames, const uint16_t *idx, size_t n_idx,
                    int64_t *out) {
    if (out == NULL || (n_idx > 0 && (buf == NULL || offs == NULL || lens == NULL ||
                                      idx == NULL))) {
        return -EINVAL;
    }
    for (size_t j = 0; j < n_idx; j++) {
        size_t k = idx[j];
        if (k >= n_frames || offs[k] > buf_len || lens[k] > buf_len - offs[k]) {
            return -EINVAL;
        }
    }
    out[0] = 0;
    out[1] = 0;
    out[2] = 0;
    struct mmsghdr msgs[MRC_IO_MAX_BATCH];
    struct iovec iov[MRC_IO_MAX_BATCH];
    size_t i = 0;
    int sent = 0;
    while (i < n_idx) {
        size_t k = n_idx - i;
        if (k > MRC_IO_MAX_BATCH) {
            k = MRC_IO_MAX_BATCH;
        }
        for (size_t j = 0; j < k; j++) {
            size_t f = idx[i + j];
            iov[j].iov_base = (void *)(buf + offs[f]);
            iov[j].iov_len = lens[f];
            /* every field set, no memset of the whole array: this runs per frame */
            msgs[j].msg_hdr = (struct msghdr){.msg_iov = &iov[j], .msg_iovlen = 1};
            msgs[j].msg_len = 0;
        }
        int r = sendmmsg(fd, msgs, (unsigned int)k, MSG_DONTWAIT);
        if (r > 0) {
            for (int j = 0; j < r; j++) {
                out[2] += lens[idx[i + (size_t)j]];
            }
            i += (size_t)r;
            sent += r;
            continue;
        }
        int e = 0;
        size_t lost = send_lost(r, n_idx - i, &e);
        if (lost == 0) {
            continue;
        }
        out[1] = e;
        out[0] += (int64_t)lost;
        if (lost > 1) {
            break;
        }
        i += 1;
    }
    return sent;
}

/* struct tpacket2_hdr (linux/if_packet.h), read field by field: tp_status at 0, tp_len at 4,
 * tp_snaplen at 8, tp_mac at 12. */
#define TP2_HDR_LEN 32u
#define TP_STATUS_USER_BIT 1u

static int ring_geometry_ok(const uint8_t *ring, size_t ring_len, size_t block_size,
                            size_t frame_size, size_t frame_nr) {
    /* the kernel's own rules (TPACKET_ALIGNMENT 16) keep every tp_status 4-byte aligned */
    if (((uintptr_t)ring & 15u) != 0 || frame_size < TP2_HDR_LEN || frame_size % 16 != 0 ||
        block_size % 16 != 0 || block_size < frame_size || frame_nr == 0 ||
        ring_len > UINT32_MAX) {
        return 0;
    }
    size_t per_block = block_size / frame_size;
    size_t blocks = (frame_nr + per_block - 1) / per_block;
    return blocks <= ring_len / block_size;
}

static size_t slot_offset(size_t k, size_t block_size, size_t frame_size) {
    size_t per_block = block_size / frame_size;
    return (k / per_block) * block_size + (k % per_block) * frame_size;
}

int mrc_ring_collect(const uint8_t *ring, size_t ring_len, size_t block_size, size_t frame_size,
                     size_t frame_nr, size_t start, size_t max, uint32_t *offs, uint32_t *lens) {
    if (ring == NULL || (max > 0 && (offs == NULL || lens == NULL)) || start >= frame_nr ||
        !ring_geometry_ok(ring, ring_len, block_size, frame_size, frame_nr)) {
        return -EINVAL;
    }
    if (max > frame_nr) {
        max = frame_nr;
    }
    if (max > INT32_MAX) {
        max = INT32_MAX;
    }
    size_t n = 0, k = start;
    while (n < max) {
        size_t at = slot_offset(k, block_size, frame_size);
        const uint8_t *h = ring + at;
        uint32_t status = __atomic_load_n((const uint32_t *)h, __ATOMIC_ACQUIRE);
        if (!(status & TP_STATUS_USER_BIT)) {
            break;
        }
        uint32_t len, snap;
        uint16_t mac;
        memcpy(&len, h + 4, 4);
        memcpy(&snap, h + 8, 4);
        memcpy(&mac, h + 12, 2);
        if (mac < TP2_HDR_LEN || mac > frame_size || snap > frame_size - mac) {
            offs[n] = (uint32_t)(at + TP2_HDR_LEN); /* inconsistent: report as cut */
            lens[n] = (uint32_t)frame_size;
        } else {
            offs[n] = (uint32_t)(at + mac);
            lens[n] = (len == snap) ? snap : (len > frame_size ? len : (uint32_t)frame_size);
        }
        n++;
        if (++k == frame_nr) {
            k = 0;
        }
    }
    return (int)n;
}

int mrc_ring_release(uint8_t *ring, size_t ring_len, size_t block_size, size_t frame_size,
                     size_t frame_nr, size_t start, size_t count) {
    if (ring == NULL || start >= frame_nr || count > frame_nr ||
        !ring_geometry_ok(ring, ring_len, block_size, frame_size, frame_nr)) {
        return -EINVAL;
    }
    size_t k = start;
    for (size_t j = 0; j < count; j++) {
        uint32_t *status = (uint32_t *)(ring + slot_offset(k, block_size, frame_size));
        __atomic_store_n(status, 0u, __ATOMIC_RELEASE); /* TP_STATUS_KERNEL */
        if (++k == frame_nr) {
            k = 0;
        }
    }
    return 0;
}
