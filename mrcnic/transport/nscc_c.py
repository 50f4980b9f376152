"""UET NSCC run by the C send engine (``csrc/mrc_nscc.c``): the shell that fills its parameters
from a :class:`~mrcnic.transport.cc.UetNscc` and copies the state between the two.

When a QP's algorithm is exactly ``UetNscc`` (the default, ``"nscc"``; not a subclass, which
may override what it reacts to) the C send engine calls NSCC itself per acknowledgment, trim,
timeout and receiver penalty, instead of listing each for a Python call: per SACK that call
was the send path's largest Python cost (docs/design/core.md). The Python object stays the
algorithm's face: its attributes are copied from C after each batch that moved the state
(:meth:`CNscc.pull`), so statistics, ``mrc-lab top`` and tests read it as before. It is the
C code's twin: tests/unit/test_nscc_c.py drives both with the same inputs and compares every
attribute, bit for bit.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from mrcnic.transport import cc as cc_mod
from mrcnic.transport.cc import UetNscc

# (UetNscc attribute, struct mrc_nscc_params field): set once
_PARAMS = (
    ("mtu", "mtu"), ("_line_Bps", "line_Bps"), ("configured_base_rtt_s", "configured_base_rtt_s"),
    ("min_cwnd", "min_cwnd"), ("_alpha", "alpha"), ("_fi", "fi"), ("_fi_scale", "fi_scale"),
    ("_eta", "eta"), ("_gamma", "gamma"), ("_keep_min", "keep_min"),
    ("_qa_gate_div", "qa_gate_div"), ("_qa_threshold", "qa_threshold_s"),
    ("_adj_bytes", "adj_bytes"), ("_adj_period", "adj_period_s"),
    ("_delay_alpha", "delay_alpha"), ("_fast_delay", "fast_delay_s"),
    ("_half_window", "half_window_s"), ("_plain_target_s", "plain_target_s"),
)  # fmt: skip
_CONSTANTS = (
    ("PLANE_SLOW_GAIN", "plane_slow_gain"), ("PLANE_ENGAGE_TARGETS", "plane_engage_targets"),
    ("PLANE_RELEASE_TARGETS", "plane_release_targets"),
    ("PLANE_TARGET_SCALE", "plane_target_scale"), ("PLANE_REVIEW_RTTS", "plane_review_rtts"),
)  # fmt: skip
_FLAGS = (("_qa", "qa"), ("_delay_md", "delay_md"), ("_max_cwnd_fixed", "max_cwnd_fixed"))
# (UetNscc attribute, struct mrc_nscc field, Python type): the state, copied both ways
_FLOATS = (
    "cwnd_bytes", "base_rtt_s", "target_delay_s", "max_cwnd", "avg_delay_s", "delay_s",
    ("_inc", "inc"), ("_last_adjust_s", "last_adjust_s"), ("_last_dec_s", "last_dec_s"),
    ("_win_min_delay", "win_min_delay"), ("_to_ignore", "to_ignore"), ("_ignored", "ignored"),
    ("_rtt_min_cur", "rtt_min_cur"), ("_rtt_min_prev", "rtt_min_prev"),
    ("_dec_extra_s", "dec_extra_s"),
)  # fmt: skip
_INTS = (
    ("_received", "received"), ("_achieved", "achieved"), ("_fi_count", "fi_count"),
    "fast_increases", "ecn_decreases", "delay_decreases", "quick_adapts", "trims", "timeouts",
    "penalty_cuts", "plane_engagements",
)  # fmt: skip
_BOOLS = (("_fast", "fast"), ("_trigger_qa", "trigger_qa"), "standing_queue")
# optional times: None in Python, a has_ flag in C
_OPTIONAL = (("_win_end_s", "win_end_s", "has_win_end"),
             ("_rtt_epoch_end_s", "rtt_epoch_end_s", "has_epoch_end"))  # fmt: skip


def _pairs(names: tuple) -> tuple[tuple[str, str], ...]:
    return tuple((n, n) if isinstance(n, str) else n for n in names)


_PLAIN = _pairs(_FLOATS + _INTS)  # copied as they are, both ways
_BOOL_PAIRS = _pairs(_BOOLS)  # uint8 in C: bool() on the way out
_CODES = {"double": "d", "int64_t": "q", "uint8_t": "B", "uint32_t": "I", "uint64_t": "Q"}


@functools.cache
def _reader(ffi: Any) -> tuple[struct.Struct, dict[str, int]]:
    """The one read of :meth:`CNscc.pull`: a Struct over ``struct mrc_nscc``'s buffer that
    unpacks the state's fields (plain, bools, optional times and their flags) in the struct's
    order, and each field's index in the tuple it gives (a getattr per field was most of the
    copy's cost, once per receive batch). One per module: every QP's struct has one layout."""
    fields = [f for _a, f in _PLAIN + _BOOL_PAIRS] + [
        x for _a, f, has in _OPTIONAL for x in (f, has)
    ]
    layout = dict(ffi.typeof("struct mrc_nscc").fields)
    order = sorted(fields, key=lambda n: layout[n].offset)
    fmt, end = "=", 0
    for name in order:
        f = layout[name]
        fmt += "x" * (f.offset - end) + _CODES[f.type.cname]
        end = f.offset + ffi.sizeof(f.type)
    return struct.Struct(fmt), {name: i for i, name in enumerate(order)}


_PLANE_SCALARS = ("window", "ratio", "review_s", "slowest")  # _PlaneDelays' names = C's
_PLANE_ARRAYS = ("last_s", "slow_s", "seen_s")


def runs_in_c(algorithm: object) -> bool:
    """Whether the C engine runs ``algorithm`` itself: UET's NSCC, not a subclass of it."""
    return type(algorithm) is UetNscc


class CNscc:
    """One QP's NSCC state in C (``struct mrc_nscc``), filled from ``algorithm``."""

    def __init__(self, ffi: Any, algorithm: UetNscc) -> None:
        n = self.n = ffi.new("struct mrc_nscc *")
        self._ffi = ffi
        self.algorithm = algorithm
        reader, at = _reader(ffi)
        self._read = reader.unpack_from
        self._buf = ffi.buffer(n)
        self._plain_names = tuple(a for a, _f in _PLAIN)
        self._plain_at = tuple(at[f] for _a, f in _PLAIN)
        self._bool_at = tuple((a, at[f]) for a, f in _BOOL_PAIRS)
        self._opt_at = tuple((a, at[f], at[has]) for a, f, has in _OPTIONAL)
        p = n.p
        for attr, field in _PARAMS:
            setattr(p, field, getattr(algorithm, attr))
        for name, field in _CONSTANTS:
            setattr(p, field, getattr(cc_mod, name))
        for attr, field in _FLAGS:
            setattr(p, field, bool(getattr(algorithm, attr)))
        self.push()

    def push(self) -> None:
        """The Python object's state into C."""
        a, n = self.algorithm, self.n
        for attr, field in _PLAIN + _BOOL_PAIRS:
            setattr(n, field, getattr(a, attr))
        for attr, field, has in _OPTIONAL:
            v = getattr(a, attr)
            setattr(n, has, v is not None)
            setattr(n, field, 0.0 if v is None else v)
        pl = a._planes
        n.planes_on = pl is not None
        if pl is not None:
            if pl.n > 16:
                raise ValueError(f"uet-1.0-nscc in C: at most 16 planes, got {pl.n}")
            n.n_planes, n.engaged = pl.n, pl.engaged
            self._planes(pl, n, to_c=True)
        self._gen = n.gen

    def pull(self) -> None:
        """C's state into the Python object, when an input moved it since the last copy."""
        n = self.n
        if n.gen == self._gen:
            return
        self._gen = n.gen
        a = self.algorithm
        v = self._read(self._buf)
        d = a.__dict__  # (UetNscc keeps its state in its __dict__: one update for the lot)
        d.update(zip(self._plain_names, map(v.__getitem__, self._plain_at), strict=True))
        for attr, i in self._bool_at:
            d[attr] = bool(v[i])
        for attr, i, has in self._opt_at:
            d[attr] = v[i] if v[has] else None
        pl = a._planes
        if pl is not None:
            pl.engaged = bool(n.engaged)
            self._planes(pl, n, to_c=False)

    def _planes(self, pl: Any, n: Any, to_c: bool) -> None:
        """The plane-aware mode's scalars and per-plane arrays, one way or the other."""
        unpack = self._ffi.unpack
        src, dst = (pl, n) if to_c else (n, pl)
        for name in _PLANE_SCALARS:
            setattr(dst, name, getattr(src, name))
        for name in _PLANE_ARRAYS:
            s_arr, d_arr = getattr(src, name), getattr(dst, name)
            if to_c:
                for i in range(pl.n):
                    d_arr[i] = s_arr[i]
            else:  # (one call for the array: the pull runs once per receive batch)
                d_arr[:] = unpack(s_arr, pl.n)
