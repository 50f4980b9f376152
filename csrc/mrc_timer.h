#ifndef MRC_TIMER_H
#define MRC_TIMER_H
#include <stdint.h>
/* A fine-grained timer for the NIC's event loop: a timerfd on CLOCK_MONOTONIC (the clock of
 * Python's time.monotonic), non-blocking and close-on-exec, registered as a loop reader.
 * Event-loop timers (libuv) have millisecond resolution; a timerfd wakes epoll at the
 * deadline, to tens of microseconds. The caller closes the fd (os.close). */

/* A new timer: its fd (>= 0), or -errno. */
int mrc_timer_open(void);

/* Arm the timer to fire once at deadline_s, absolute CLOCK_MONOTONIC seconds; a deadline in
 * the past fires at once. Replaces any earlier deadline and clears expirations not yet read.
 * Returns 0, or -errno (-EINVAL for a deadline that is not a finite number). */
int mrc_timer_arm(int fd, double deadline_s);

/* Consume the expirations: how many since the last arm or read (0 when none, the fd is
 * non-blocking), or -errno. */
int64_t mrc_timer_ack(int fd);
#endif
