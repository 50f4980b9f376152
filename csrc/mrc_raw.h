#ifndef MRC_RAW_H
#define MRC_RAW_H
#include <stddef.h>
#include <stdint.h>
/* The physical limit the NIC engine is measured against (make bench-nic): a minimal C
 * AF_PACKET sender that sends one prepared frame over and over with sendmmsg, and a minimal
 * receiver that drains a TPACKET_V3 ring, both for a fixed time. Neither builds, checks or
 * places anything: they are what moving the frames costs, nothing more. */

struct mrc_raw_cfg {
    int fd;                 /* a bound AF_PACKET socket (send: any; receive: see below) */
    const uint8_t *frame;   /* send: the frame to send */
    uint32_t frame_len;     /* send: its length */
    uint32_t batch;         /* send: frames per sendmmsg, 1..256 */
    int64_t duration_ns;    /* run this long (CLOCK_MONOTONIC) */
    uint32_t block_size;    /* receive: TPACKET_V3 block size (a multiple of the page size) */
    uint32_t block_nr;      /* receive: blocks in the ring; 0: recvmmsg instead */
    uint32_t slot_len;      /* receive with recvmmsg: bytes per frame slot */
    double rate_fps;        /* send: frames per second (0: as fast as the kernel takes them) */
    int64_t tick_ns;        /* send, paced: sleep at least this long between sends (a NIC
                             * pacer's tick: the frames due in it go in one sendmmsg) */
};

struct mrc_raw_result {
    int64_t frames;         /* sent (accepted by the kernel) or received */
    int64_t bytes;
    int64_t calls;          /* sendmmsg calls, or poll wake-ups */
    int64_t errors;         /* sends refused (ENOBUFS...), or frames the ring lost */
    int64_t elapsed_ns;
    int32_t last_errno;
};

/* Send cfg->frame until cfg->duration_ns has passed; with rate_fps > 0 paced at that rate
 * (a frame the kernel refuses counts as sent and lost, as on a wire). Returns 0 or -errno
 * (-EINVAL for bad arguments: nothing sent). */
int mrc_raw_send(const struct mrc_raw_cfg *cfg, struct mrc_raw_result *res);

/* Count every frame that arrives on cfg->fd (a bound AF_PACKET socket) until
 * cfg->duration_ns has passed since the first one (or twice that with none). With block_nr
 * > 0 through a TPACKET_V3 ring set up here (unmapped before returning: the kernel writes
 * the frames into it, on veth in the sender's softirq, so this side pays almost nothing);
 * with block_nr 0 through recvmmsg batches of cfg->batch frames into slots of slot_len bytes
 * (the kernel copies each frame out on this side's time, as the NIC's receive does).
 * Returns 0 or -errno. */
int mrc_raw_recv(const struct mrc_raw_cfg *cfg, struct mrc_raw_result *res);
#endif
