#ifndef MRC_IO_H
#define MRC_IO_H
#include <stddef.h>
#include <stdint.h>
/* Batched datagram I/O for the switch (and benchmarks): recvmmsg/sendmmsg over buffers the
 * caller owns, and the walk of a PACKET_MMAP receive ring. No allocation: the mmsghdr/iovec arrays live on the stack, at most
 * MRC_IO_MAX_BATCH (256) frames per call. */
int mrc_io_recv_batch(int fd, uint8_t *ring, size_t ring_len, size_t slot_len, uint32_t *lens,
                      size_t max_frames);
int mrc_io_send_batch(int fd, const uint8_t *buf, size_t buf_len, const uint32_t *lens,
                      size_t n_frames, int32_t *err_out);

/* Send n_idx frames of a batch in place, without blocking: frame idx[j] (< n_frames) starts
 * at buf + offs[idx[j]] and has lens[idx[j]] bytes (iovecs into the buffer: no copy in user
 * space). Errors as mrc_io_send_batch; out[0] = frames failed, out[1] = the last errno,
 * out[2] = bytes sent. Returns the number of frames sent, or -EINVAL (a frame outside buf,
 * an index out of range: nothing sent). */
int mrc_io_send_iov(int fd, const uint8_t *buf, size_t buf_len, const uint32_t *offs,
                    const uint32_t *lens, size_t n_frames, const uint16_t *idx, size_t n_idx,
                    int64_t *out);

/* A PACKET_RX_RING (TPACKET_V2) mapped at ring: frame slot k of frame_nr starts at
 * ring + (k / (block_size / frame_size)) * block_size + (k % (block_size / frame_size)) *
 * frame_size and begins with a struct tpacket2_hdr. Starting at slot `start`, collect up to
 * max consecutive slots the kernel has handed to user space (TP_STATUS_USER, read with
 * acquire ordering): offs[i] = offset of the frame's Ethernet header in ring, lens[i] = its
 * length, or a value >= frame_size when the kernel cut it (or the header is inconsistent).
 * Returns how many (0..max), or -EINVAL for a geometry that does not fit ring_len (ring must
 * be 16-byte aligned, frame_size and block_size multiples of 16, as the kernel requires). */
int mrc_ring_collect(const uint8_t *ring, size_t ring_len, size_t block_size, size_t frame_size,
                     size_t frame_nr, size_t start, size_t max, uint32_t *offs, uint32_t *lens);

/* Hand count slots from `start` (wrapping) back to the kernel (TP_STATUS_KERNEL, release
 * ordering). Returns 0, or -EINVAL as mrc_ring_collect or when count > frame_nr. */
int mrc_ring_release(uint8_t *ring, size_t ring_len, size_t block_size, size_t frame_size,
                     size_t frame_nr, size_t start, size_t count);
#endif
