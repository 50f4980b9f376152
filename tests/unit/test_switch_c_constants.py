"""Every number Python copies from the switch's C headers equals the C module's.

Python keeps its own copies of C enums and constants where they must exist without the C
module (the pure-Python twins, MRC_PURE_PYTHON=1) or read better as an IntEnum; this file
holds each copy to ``mrcnic._mrcfast.lib``, so a C change that Python missed fails here
instead of mis-forwarding. A constant only C uses internally is checked by behaviour.
"""

from __future__ import annotations

import errno
import importlib
import socket

import pytest

from mrcnic.io import batch as batch_io
from mrcswitch import cloop, config, cqueue, fastpath, fcache, pipeline
from mrcswitch.queue import Verdict


def _c_module():
    # the built module even under MRC_PURE_PYTHON=1: the numbers must agree either way
    try:
        return importlib.import_module("mrcnic._mrcfast")
    except ImportError as exc:
        pytest.skip(f"C module mrcnic._mrcfast not built ({exc}): nothing to compare with")


@pytest.fixture(scope="module")
def lib():
    return _c_module().lib


def _c_names(lib, prefix: str) -> set[str]:
    return {name for name in dir(lib) if name.startswith(prefix)}


def test_wake_reasons_are_the_loops_codes(lib):
    codes = _c_names(lib, "MRC_SW_") - {"MRC_SW_MAX_PORTS", "MRC_SW_MAX_GROUP"}
    assert {f"MRC_SW_{w.name}" for w in cloop.Wake} == codes  # none missing on either side
    for w in cloop.Wake:
        assert w == getattr(lib, f"MRC_SW_{w.name}"), w


def test_fastpath_verdicts_and_sizes(lib):
    assert (fastpath.SEND, fastpath.QUEUE, fastpath.DROP, fastpath.REFUSED) == (
        lib.MRC_FWD_SEND, lib.MRC_FWD_QUEUE, lib.MRC_FWD_DROP, lib.MRC_FWD_REFUSED,
    )  # fmt: skip
    assert fastpath.HDR_LEN == lib.MRC_FWD_HDR_LEN
    assert fastpath.L2_LEN == lib.MRC_FWD_L2_LEN
    assert fastpath.MAX_BATCH == lib.MRC_FWD_MAX_BATCH
    assert fastpath.MAX_PORTS == lib.MRC_FWD_MAX_PORTS


def test_frame_offsets_and_decision_records_are_the_pipelines(lib):
    assert pipeline.OFF_L4 == lib.MRC_FWD_HDR_LEN  # the 54 bytes a decision depends on
    assert fastpath.OFF_PLEN == pipeline.OFF_IP + 4 == lib.MRC_FWD_OFF_PLEN
    assert pipeline.OFF_HOP == lib.MRC_FWD_OFF_HOP
    assert pipeline.OFF_DST == lib.MRC_FWD_OFF_DST
    assert pipeline.SHIFT_UNIT == 1 << lib.MRC_FWD_SHIFT_BITS == lib.MRC_FWD_MAX_PORTS


def test_decision_cache_layout(lib):
    assert fcache.ENTRY_BYTES == lib.MRC_FCACHE_ENTRY
    assert fcache.PROBES == lib.MRC_FCACHE_PROBES
    assert fcache.KEY_LEN == lib.MRC_FWD_HDR_LEN
    assert fcache.KEY_AT == lib.MRC_FCACHE_KEY_AT
    assert fcache.CODE_AT == lib.MRC_FCACHE_CODE_AT
    assert fcache.KEY_AT + fcache.KEY_LEN <= fcache.CODE_AT <= fcache.ENTRY_BYTES - 4


def test_twin_structs_have_the_c_fields():
    ffi = _c_module().ffi
    for twin, ctype in (
        (fastpath.FwdRx, "struct mrc_fwd_rx"),
        (fastpath.FwdSent, "struct mrc_fwd_sent"),
        (fastpath.FwdResult, "struct mrc_fwd_result"),
        (fastpath.FwdBatch, "struct mrc_fwd_batch"),
    ):
        assert tuple(twin.__slots__) == tuple(name for name, _ in ffi.typeof(ctype).fields)


def test_egress_queue_verdicts_and_send_batch(lib):
    codes = _c_names(lib, "MRC_EQ_") - {"MRC_EQ_SEND_BATCH", "MRC_EQ_MAX_DELAY_NS"}
    assert {f"MRC_EQ_{v.name}" for v in Verdict} == codes
    for v in Verdict:
        assert v == getattr(lib, f"MRC_EQ_{v.name}"), v
    assert cqueue.SEND_BATCH == lib.MRC_EQ_SEND_BATCH
    assert config.MAX_DELAY_NS == lib.MRC_EQ_MAX_DELAY_NS


def test_io_max_batch_is_what_one_c_receive_takes(lib):
    # MRC_IO_MAX_BATCH is private to csrc/mrc_io.c: a receive asked for more returns at most it
    ffi = _c_module().ffi
    n, slot = batch_io.MAX_BATCH + 20, 16
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        a.setblocking(False)
        for i in range(n):
            try:
                a.send(i.to_bytes(4, "big"))
            except BlockingIOError:
                pytest.skip("the socket pair holds fewer datagrams than one batch and more")
        buf, lens = ffi.new("uint8_t[]", n * slot), ffi.new("uint32_t[]", n)
        got = lib.mrc_io_recv_batch(b.fileno(), buf, n * slot, slot, lens, n)
        assert got == batch_io.MAX_BATCH
        assert lib.mrc_io_recv_batch(b.fileno(), buf, n * slot, slot, lens, n) == 20
        assert lib.mrc_io_recv_batch(b.fileno(), buf, 0, slot, lens, n) == -errno.EINVAL
