/* A timerfd on CLOCK_MONOTONIC: sub-millisecond wake-ups for an event loop whose own timers
 * have millisecond resolution (mrcnic/io/aio.py, FdTimer). No allocation, status codes only. */
#include "mrc_timer.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

int mrc_timer_open(void) {
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int mrc_timer_arm(int fd, double deadline_s) {
    if (!isfinite(deadline_s)) {
        return -EINVAL;
    }
    struct itimerspec its = {0};
    if (deadline_s < 1e-9) {
        /* it_value 0 would disarm: the earliest absolute time instead, which is past */
        its.it_value.tv_nsec = 1;
    } else if (deadline_s >= 9.0e18 / 1e9) {
        its.it_value.tv_sec = (time_t)9000000000LL; /* centuries away: never, in effect */
    } else {
        int64_t ns = (int64_t)(deadline_s * 1e9);
        if (ns < 1) {
            ns = 1;
        }
        its.it_value.tv_sec = (time_t)(ns / 1000000000LL);
        its.it_value.tv_nsec = (long)(ns % 1000000000LL);
    }
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) < 0 ? -errno : 0;
}

int64_t mrc_timer_ack(int fd) {
    uint64_t n = 0;
    ssize_t r = read(fd, &n, sizeof n);
    if (r == (ssize_t)sizeof n) {
        return (int64_t)n;
    }
    if (r < 0) {
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    }
    return -EIO;
}
