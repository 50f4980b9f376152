"""The numbers libmrc's model fixes: EV width, window units, timeout and retry ranges."""

from __future__ import annotations

#: bits in one of our EVs (16 in the UDP source port, 16 in the flow label: docs/design/wire.md)
EV_BITS = 32
#: PSNs per unit of libmrc's tracking-window size (its "MPR")
WINDOW_UNIT_PSNS = 128
#: the lab runs production's rates / 1000, so its times are x1000 (docs/design/transport.md)
LAB_TIME_SCALE = 1000.0
#: libmrc's ACK timeout is 1.024 us x 2**t
ACK_TIMEOUT_BASE_S = 1.024e-6
MAX_ACK_TIMEOUT = 24  # 2**24 x 1.024 us = 17.18 s
MAX_LINEAR_RETRIES = 7
MAX_EXP_RETRIES = 24  # libmrc's next value, 25, means "retry forever": not supported here
#: the window sizes our responder supports (QpAttributes.problem): powers of two, 64..2**23
MAX_WINDOW_UNITS = (1 << 23) // WINDOW_UNIT_PSNS
MAX_WIMM_INFLIGHT = 0x8000
