"""csrc/mrc_fwd.c and the ring/iovec parts of csrc/mrc_io.c vs their Python twins, and the
batch path (pipeline memo + Planner) vs the per-frame pipeline.

The batch path must give every frame exactly the fate Pipeline.process gives it: the same
out-port and bytes for a forward, the same reason for a drop; C only applies decisions.
"""

from __future__ import annotations

import errno
import socket
import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnic.io import batch as batch_io
from mrcswitch.config import config_from_dict
from mrcswitch.fastpath import DROP, HDR_LEN, QUEUE, REFUSED, SEND, Planner, result_fields
from mrcswitch.pipeline import SHIFT_UNIT, Drop, DropReason, Forward, Pipeline
from mrcswitch.table import build_table

pytestmark = pytest.mark.skipif(batch_io.BACKEND != "c", reason="C module not built")

OWN, OWN2, B, C, T1 = 0x1100, 0x1101, 0x3001, 0x3002, 0x2001
MACS = [bytes([2, 0, 0, 0, 1, i]) for i in range(3)]
PEERS = [bytes([2, 0, 0, 0, 2, i]) for i in range(3)]
SRC = bytes.fromhex("20010db8000000000000000000000001")
CFG = config_from_dict(
    {
        "name": "t",
        "own_usids": [f"{OWN:x}", f"{OWN2:x}"],
        "ports": [
            {"name": n, "interface": f"v{i}", "peer_mac": ":".join(f"{b:02x}" for b in PEERS[i]),
             "rate_mbit": 100, "buffer_bytes": 1 << 20}
            for i, n in enumerate(("a", "b", "c"))
        ],
        "table": {f"{B:x}": "b", f"{C:x}": "c", f"{T1:x}": "c"},
    }
)  # fmt: skip
HIST = max(DropReason) + 1
SLOT = 160  # receive slot: frames longer than this were "cut" by the receive path


def new_pipe() -> Pipeline:
    return Pipeline(build_table(CFG), MACS, PEERS)


def addr(*usids: int) -> bytes:
    body = b"".join(u.to_bytes(2, "big") for u in usids)
    return (bytes.fromhex("fcbbbb00") + body + bytes(16))[:16]


def frame(dst: bytes, hop: int = 64, payload: bytes = b"x" * 20, plen: int | None = None,
          in_port: int = 0, src: bytes = SRC) -> bytes:  # fmt: skip
    udp = b"\x9c\x40\x12\xb7" + (8 + len(payload)).to_bytes(2, "big") + b"\0\0" + payload
    n = len(udp) if plen is None else plen
    ip = (6 << 28 | 0x12345).to_bytes(4, "big") + n.to_bytes(2, "big") + bytes([17, hop])
    return MACS[in_port] + PEERS[in_port] + b"\x86\xdd" + ip + src + dst + udp


usids = st.sampled_from([0, OWN, OWN2, B, C, T1, 0x4444])


@st.composite
def frames(draw) -> bytes:
    """Valid frames with random paths, hop limits, payload lengths that lie, cuts, and
    random bytes; now and then the same frame twice (memo hits)."""
    kind = draw(st.integers(0, 9))
    if kind < 6:
        f = frame(
            addr(*draw(st.lists(usids, min_size=1, max_size=6))),
            hop=draw(st.sampled_from([0, 1, 2, 64, 255])),
            payload=b"p" * draw(st.integers(0, 120)),
            plen=draw(st.one_of(st.none(), st.integers(0, 200))),
            in_port=draw(st.sampled_from([0, 0, 0, 1])),
        )
        if draw(st.booleans()):
            f = f[: draw(st.integers(0, len(f)))]
        return f
    return draw(st.binary(max_size=200))


def load(ring: batch_io.RecvRing, batch: list[bytes], lens: list[int] | None = None) -> None:
    for i, f in enumerate(batch):
        off = i * ring.slot_len
        k = min(len(f), ring.slot_len)
        ring.view[off : off + k] = f[:k]
        ring.lens[i] = len(f) if lens is None else lens[i]


# --- parity: C vs twin on the same inputs ------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(frames(), min_size=0, max_size=24),
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=24, max_size=24),
    st.lists(st.integers(-1, 3000), min_size=3, max_size=3),
    st.data(),
)
def test_plan_and_keys_c_and_twin_agree(batch, raw_codes, budgets, data):
    n = len(batch)
    pipe = new_pipe()
    # a mix of real decisions and arbitrary codes (bad ports, shifts, reasons, INT32_MIN)
    codes = []
    for i, f in enumerate(batch):
        hdr = (f + bytes(HDR_LEN))[:HDR_LEN]
        real = pipe.decide_header(hdr, 0)
        codes.append(real if data.draw(st.booleans()) else raw_codes[i])
    results = []
    for use_c in (True, False):
        ring = batch_io.RecvRing(SLOT, 24, use_c=use_c)
        load(ring, batch)
        pl = Planner(pipe.l2_headers, pipe.block_bytes, 24, HIST, use_c=use_c)
        keys = pl.keys(ring, n)
        pl.dec[:n] = array("i", codes)
        pl.budget[:] = array("q", budgets)
        k = pl.plan(ring, n)
        results.append((
            keys, k, bytes(ring.view), list(ring.lens[:n]), list(pl.verdict[:n]),
            list(pl.order[: sum(pl.port_count)]), list(pl.port_count), list(pl.port_start),
            list(pl.port_bytes), list(pl.budget), list(pl.hist), result_fields(pl.res),
            list(pl.defer[:k]),
        ))  # fmt: skip
    assert results[0] == results[1]


def test_plan_refuses_bad_arguments_in_both():
    for use_c in (True, False):
        ring = batch_io.RecvRing(SLOT, 4, use_c=use_c)
        with pytest.raises(ValueError):
            Planner([b"x" * 11], 4, 4, HIST, use_c=use_c)  # an l2 header is 12 bytes
        pl = Planner([bytes(12)], 15, 4, HIST, use_c=use_c)  # block of 15 bytes: no uSID
        with pytest.raises(ValueError):
            pl.plan(ring, 1)


def test_c_and_twin_check_batch_bounds_themselves():
    """The structs carry the arrays' sizes: a batch longer than the planner's scratch or the
    ring's offs/lens is refused by C (and the twin), not only by Planner's own checks."""
    from mrcnic import _mrcfast
    from mrcswitch import fastpath

    lib, ffi = _mrcfast.lib, _mrcfast.ffi
    for use_c in (True, False):
        ring = batch_io.RecvRing(SLOT, 8, use_c=use_c)
        load(ring, [frame(addr(OWN, B))] * 8)
        for max_batch, too_long in ((4, 5), (16, 9)):  # the planner's bound, the ring's
            pl = Planner(new_pipe().l2_headers, 4, max_batch, HIST, use_c=use_c)
            rx, b = pl.new_rx(ring), pl._b
            if use_c:
                keys = ffi.new("uint8_t[]", HDR_LEN * 16)
                c_plan = lambda n, b=b, rx=rx: lib.mrc_fwd_plan(b, rx, n)  # noqa: E731
                c_keys = lambda n, rx=rx, k=keys: lib.mrc_fwd_keys(rx, n, k, HDR_LEN * 16)  # noqa: E731
            else:
                keys = memoryview(bytearray(HDR_LEN * 16))
                c_plan = lambda n, b=b, rx=rx: fastpath.plan_py(b, rx, n)  # noqa: E731
                c_keys = lambda n, rx=rx, k=keys: fastpath.keys_py(rx, n, k)  # noqa: E731
            before = result_fields(pl.res)
            assert c_plan(too_long) == -errno.EINVAL
            assert result_fields(pl.res) == before  # nothing written
            assert c_keys(9) == -errno.EINVAL  # the ring has 8 slots
            assert c_plan(too_long - 1) >= 0 and pl.res.n == too_long - 1
            assert c_keys(8) == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=12), st.data())
def test_send_iov_c_and_twin_agree(batch, data):
    n = len(batch)
    idx = data.draw(st.lists(st.integers(0, max(0, n - 1)), max_size=2 * n)) if n else []
    got = []
    for use_c in (True, False):
        ring = batch_io.RecvRing(SLOT, 12, use_c=use_c)
        load(ring, batch, [min(len(f), SLOT) for f in batch])
        pl = Planner([bytes(12)], 4, 24, HIST, use_c=use_c)  # order[] holds up to 24
        pl.order[: len(idx)] = array("H", idx)
        pl.port_start[0], pl.port_count[0] = 0, len(idx)
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        with a, b:
            res = pl.send(a.fileno(), ring, n, 0)
            received = batch_io_drain(b)
        got.append((res, received))
    assert got[0] == got[1]
    sent, failed, _err, nbytes = got[0][0]
    assert (sent, failed) == (len(idx), 0)
    assert got[0][1] == [batch[i][:SLOT] for i in idx]
    assert nbytes == sum(min(len(batch[i]), SLOT) for i in idx)


def batch_io_drain(s: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(65536, socket.MSG_DONTWAIT))
        except BlockingIOError:
            return out


def test_send_iov_bounds_and_dead_peer():
    for use_c in (True, False):
        ring = batch_io.RecvRing(SLOT, 4, use_c=use_c)
        load(ring, [b"abc", b"defg"])
        pl = Planner([bytes(12)], 4, 4, HIST, use_c=use_c)
        pl.order[0], pl.port_start[0], pl.port_count[0] = 3, 0, 1
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        with a, b, pytest.raises(ValueError):
            pl.send(a.fileno(), ring, 2, 0)  # index 3 of a 2-frame batch
        pl.order[0], pl.order[1], pl.port_count[0] = 0, 1, 2
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        b.close()
        with a:
            sent, failed, err, nbytes = pl.send(a.fileno(), ring, 2, 0)
        assert (sent, failed, nbytes) == (0, 2, 0) and err != 0


# --- TPACKET_V2 ring walk on synthetic rings -------------------------------------------------

TP = struct.Struct("=IIIH")


@st.composite
def rings(draw):
    frame_size = draw(st.sampled_from([64, 96, 128]))
    per_block = draw(st.integers(1, 3))
    block = frame_size * per_block + draw(st.sampled_from([0, 16, 32]))
    blocks = draw(st.integers(1, 3))
    frame_nr = per_block * blocks - draw(st.integers(0, per_block - 1))
    slots = []
    for _ in range(frame_nr):
        slots.append((
            draw(st.sampled_from([0, 1, 1, 1, 5, 2])),  # status (USER bit = 1)
            draw(st.integers(0, 200)),  # tp_len
            draw(st.integers(0, 120)),  # tp_snaplen
            draw(st.sampled_from([0, 31, 32, 40, 66, frame_size, frame_size + 2])),  # tp_mac
        ))  # fmt: skip
    start = draw(st.integers(0, frame_nr - 1))
    return block, frame_size, frame_nr, blocks, slots, start, draw(st.integers(0, 2 * frame_nr))


@settings(max_examples=200, deadline=None)
@given(rings(), st.integers(0, 5))
def test_ring_collect_and_release_c_and_twin_agree(geo, release):
    from mrcnic import _mrcfast

    ffi, lib = _mrcfast.ffi, _mrcfast.lib
    block, fsize, fnr, blocks, slots, start, mx = geo
    ring_len = block * blocks
    per_block = block // fsize
    c_ring = ffi.new("uint8_t[]", ring_len)
    view = memoryview(ffi.buffer(c_ring))
    for k, sl in enumerate(slots):
        TP.pack_into(view, (k // per_block) * block + (k % per_block) * fsize, *sl)
    py_buf = bytearray(view)
    offs, lens = ffi.new("uint32_t[]", 2 * fnr + 1), ffi.new("uint32_t[]", 2 * fnr + 1)
    n_c = lib.mrc_ring_collect(c_ring, ring_len, block, fsize, fnr, start, mx, offs, lens)
    py_offs = memoryview(bytearray(4 * (2 * fnr + 1))).cast("I")
    py_lens = memoryview(bytearray(4 * (2 * fnr + 1))).cast("I")
    n_py = batch_io.ring_collect_py(memoryview(py_buf), block, fsize, fnr, start, mx, py_offs,
                                    py_lens)  # fmt: skip
    assert n_c == n_py
    assert list(offs[0:n_c]) == list(py_offs[:n_py]) and list(lens[0:n_c]) == list(py_lens[:n_py])
    for i in range(n_c):  # every frame reported lies inside its slot, or is reported as cut
        assert lens[i] >= fsize or offs[i] + lens[i] <= ring_len
    count = min(release, fnr)
    rc = lib.mrc_ring_release(c_ring, ring_len, block, fsize, fnr, start, count)
    rp = batch_io.ring_release_py(memoryview(py_buf), block, fsize, fnr, start, count)
    assert rc == rp == 0 and bytes(view) == bytes(py_buf)
    assert (
        lib.mrc_ring_release(c_ring, ring_len, block, fsize, fnr, start, fnr + 1) == -errno.EINVAL
    )


def test_ring_geometry_fits_the_kernels_rules():
    for cap in (64, 1518, 4214, 9216, 65535):
        for frames in (1, 256, 1000):
            block, fsize, fnr, bnr = batch_io.ring_geometry(cap, frames)
            assert block % batch_io._PAGE == 0 and fsize % 16 == 0
            assert fsize >= batch_io.TP2_MAC_OFFSET + cap and fnr >= frames
            assert fnr == (block // fsize) * bnr


# --- the batch path gives every frame the per-frame pipeline's fate ---------------------------


def batch_path(pipe: Pipeline, batch: list[bytes], budgets: list[int], use_c: bool):
    """What the switch does with one received batch (switch.Switch._rx), without sockets:
    -> per frame ("fwd", port, bytes, sent_now) or ("drop", reason)."""
    n = len(batch)
    ring = batch_io.RecvRing(SLOT, 32, use_c=use_c)
    load(ring, batch)
    pl = Planner(pipe.l2_headers, pipe.block_bytes, 32, HIST, use_c=use_c)
    cache = pipe.header_cache(0)
    keys = pl.keys(ring, n)
    codes = [cache.get(k) for k in keys]
    codes = [pipe.decide_header(k, 0) if c is None else c for k, c in zip(keys, codes, strict=True)]
    pl.dec[:n] = array("i", codes)
    pl.budget[:] = array("q", budgets)
    pl.plan(ring, n)
    out = []
    for i in range(n):
        v, ln, off = pl.verdict[i], ring.lens[i], ring.offs[i]
        if v in (SEND, QUEUE):
            out.append(("fwd", codes[i] & 0xFFFF, bytes(ring.view[off : off + ln]), v == SEND))
        elif v == DROP:
            out.append(("drop", DropReason(-codes[i])))
        else:
            assert v == REFUSED
            if ln > SLOT:
                out.append(("drop", DropReason.TOO_BIG))
                continue
            f = bytearray(ring.view[off : off + ln])
            r = pipe.decide(f, 0)
            out.append(("fwd", r, bytes(f), False) if r >= 0 else ("drop", DropReason(-r)))
    return out, pl


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames(), max_size=32), st.booleans())
def test_batch_path_gives_each_frame_the_pipelines_fate(batch, use_c):
    pipe = new_pipe()
    got, _ = batch_path(pipe, batch, [1 << 30] * 3, use_c)
    for f, g in zip(batch, got, strict=True):
        if len(f) > SLOT:
            assert g == ("drop", DropReason.TOO_BIG)
            continue
        want = new_pipe().process(f, 0)
        if isinstance(want, Forward):
            assert g[:3] == ("fwd", want.port, bytes(want.frame))
        else:
            assert isinstance(want, Drop) and g == ("drop", want.reason)


def test_budget_is_fifo_per_port():
    pipe = new_pipe()
    small = frame(addr(OWN, B), payload=b"s" * 10)
    big = frame(addr(OWN, B), payload=b"b" * 80)
    other = frame(addr(OWN, C), payload=b"c" * 10)
    # port 1 may take one small frame: the big one queues, and so does the small one after it
    got, pl = batch_path(pipe, [small, big, small, other], [-1, len(small) + 5, 10**6], True)
    assert [g[3] for g in got] == [True, False, False, True]
    assert pl.budget[1] == -1 and pl.port_bytes[1] == len(small)
    assert list(pl.order[:2]) == [0, 3] and list(pl.port_count) == [0, 1, 1]
    # a port that may not send (down, or its queue is not empty) queues everything
    got, _ = batch_path(pipe, [small, other], [0, -1, -1], False)
    assert [g[3] for g in got] == [False, False]


def test_drops_are_counted_per_reason_and_short_frames_refused():
    pipe = new_pipe()
    hop1 = frame(addr(OWN, B), hop=1)
    good = frame(addr(OWN, B))
    lying = frame(addr(OWN, B), plen=100)  # claims more than it has
    for use_c in (True, False):
        got, pl = batch_path(pipe, [hop1, hop1, good[:40], lying, good], [10**6] * 3, use_c)
        assert pl.hist[DropReason.HOP_LIMIT] == 2 and pl.res.drops == 2
        assert [pl.verdict[i] for i in range(5)] == [DROP, DROP, REFUSED, REFUSED, SEND]
        assert got[2] == got[3] == ("drop", DropReason.MALFORMED)


def test_header_memo_is_per_in_port_and_bounded():
    pipe = new_pipe()
    f = frame(addr(OWN, B))
    assert pipe.decide_header(f[:HDR_LEN], 0) == 1 | 1 * SHIFT_UNIT
    assert pipe.decide_header(f[:HDR_LEN], 1) == -DropReason.NOT_MY_MAC
    assert pipe.header_cache(0)[f[:HDR_LEN]] == 1 | SHIFT_UNIT
    for i in range(5000):
        pipe.decide_header(f[:38] + i.to_bytes(16, "big"), 0)
    assert len(pipe.header_cache(0)) <= 4096


# --- the one-call wake-up (csrc/mrc_fcache.c) vs its twin ----------------------------------

from types import SimpleNamespace  # noqa: E402

from mrcswitch.fcache import DecisionCache  # noqa: E402

W_FSIZE, W_PER_BLOCK, W_BLOCKS = 256, 2, 4
W_NR = W_PER_BLOCK * W_BLOCKS
W_MAC = batch_io.TP2_MAC_OFFSET


def mmap_ring(use_c: bool, slots_data: list, head: int, max_frames: int) -> SimpleNamespace:
    """A synthetic TPACKET_V2 ring shaped like batch_io.MmapRing (no socket)."""
    block = W_FSIZE * W_PER_BLOCK
    ring_len = block * W_BLOCKS
    if use_c:
        from mrcnic import _mrcfast

        ffi = _mrcfast.ffi
        ptr = ffi.new("uint8_t[]", ring_len)
        view = memoryview(ffi.buffer(ptr))
        c_offs, c_lens = ffi.new("uint32_t[]", max_frames), ffi.new("uint32_t[]", max_frames)
        offs = memoryview(ffi.buffer(c_offs)).cast("I")
        lens = memoryview(ffi.buffer(c_lens)).cast("I")
    else:
        ptr = c_offs = c_lens = None
        view = memoryview(bytearray(ring_len))
        offs = memoryview(array("I", bytes(4 * max_frames)))
        lens = memoryview(array("I", bytes(4 * max_frames)))
    for k, (status, f) in enumerate(slots_data):
        at = (k // W_PER_BLOCK) * block + (k % W_PER_BLOCK) * W_FSIZE
        snap = min(len(f), W_FSIZE - W_MAC)
        TP.pack_into(view, at, status, len(f), snap, W_MAC)
        view[at + W_MAC : at + W_MAC + snap] = f[:snap]
    return SimpleNamespace(
        ptr=ptr, view=view, buf_len=ring_len, block_size=block, frame_size=W_FSIZE,
        frame_nr=W_NR, head=head, slots=max_frames, offs=offs, lens=lens, c_offs=c_offs,
        c_lens=c_lens, cap=SLOT,
    )  # fmt: skip


def run_wake(use_c, slots_data, head, max_frames, entries, stored, budgets, fd_kind,
             bucket=((0.0, 0, 0),) * 3, now_ns=0):  # fmt: skip
    """One mrc_fwd_wake (or its twin) with real sockets per port -> everything it wrote."""
    pipe = new_pipe()
    ring = mmap_ring(use_c, slots_data, head, max_frames)
    cache = DecisionCache(entries, use_c=use_c)
    for key, code in stored:
        cache.insert(key, code)
    table_before = bytes(cache.view)
    pl = Planner(pipe.l2_headers, pipe.block_bytes, 16, HIST, use_c=use_c)
    pl.budget[:] = array("q", budgets)
    for j, (rate, burst, stamp) in enumerate(bucket):
        pl.rate_per_ns[j], pl.burst[j], pl.stamp_ns[j] = rate, burst, stamp
    socks = []
    for j, kind in enumerate(fd_kind):
        if kind == "none":
            pl.fds[j] = -1
            socks.append(None)
            continue
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        if kind == "dead":
            b.close()
        pl.fds[j] = a.fileno()
        socks.append((a, b))
    try:
        n = pl.wake(ring, cache, now_ns)
        received = [batch_io_drain(s[1]) if s and s[1].fileno() >= 0 else None for s in socks]
    finally:
        for s in socks:
            if s:
                s[0].close()
                s[1].close()
    res = result_fields(pl.res)
    sent_ports = list(pl.sent_ports[: res["n_sent_ports"]])
    # errno text is the kernel's; only "some error or none" must agree
    out = [(p, pl.sent[p].sent, pl.sent[p].failed, bool(pl.sent[p].err), pl.sent[p].bytes)
           for p in sent_ports]  # fmt: skip
    planned = not res["misses"]
    return (
        n, res, out, received, bytes(ring.view), list(ring.offs[:n]), list(ring.lens[:n]),
        list(pl.verdict[:n]) if planned else None, list(pl.defer[: res["n_defer"]]),
        list(pl.order[: sum(pl.port_count)]) if planned else None, list(pl.budget),
        list(pl.hist), bytes(cache.view) == table_before, list(pl.stamp_ns),
    )  # fmt: skip


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from([0, 1, 1, 1, 5]), frames()), min_size=W_NR,
             max_size=W_NR),
    st.integers(0, W_NR - 1),
    st.integers(1, 16),
    st.sampled_from([1, 2, 8, 64]),
    st.lists(st.integers(-1, 3000), min_size=3, max_size=3),
    st.lists(st.sampled_from(["ok", "ok", "none", "dead"]), min_size=3, max_size=3),
    st.lists(st.tuples(st.sampled_from([0.0, 0.0125, 1.25, 1 / 3]), st.integers(0, 4000),
                       st.integers(0, 10**6)), min_size=3, max_size=3),
    st.integers(0, 2 * 10**6),
    st.data(),
)  # fmt: skip
def test_wake_c_and_twin_agree(slots_data, head, max_frames, entries, budgets, fd_kind, bucket,
                               now_ns, data):  # fmt: skip
    pipe = new_pipe()
    stored = []
    for _status, f in slots_data:  # most keys stored (real decisions), some not, a few raw
        key = (f[: min(len(f), SLOT)] + bytes(HDR_LEN))[:HDR_LEN]
        how = data.draw(st.sampled_from(["real", "real", "real", "skip", "raw"]))
        if how == "real":
            stored.append((key, pipe.decide_header(key, 0)))
        elif how == "raw":
            stored.append((key, data.draw(st.integers(-(2**31), 2**31 - 1))))
    got = [
        run_wake(
            use_c, slots_data, head, max_frames, entries, stored, budgets, fd_kind, bucket, now_ns
        )  # fmt: skip
        for use_c in (True, False)
    ]
    assert got[0] == got[1]
    n, res = got[0][0], got[0][1]
    assert res["n"] == n
    if res["misses"]:  # nothing else was done
        assert res["n_sent_ports"] == res["n_defer"] == res["released"] == res["rx_bytes"] == 0
    else:
        assert res["released"] == (res["n_defer"] == 0 and n > 0)


def test_wake_forwards_like_the_pipeline_and_misses_touch_nothing():
    pipe = new_pipe()
    good = [frame(addr(OWN, B)), frame(addr(OWN, C), payload=b"q" * 30), frame(addr(B))]
    slots_data = [(1, f) for f in good] + [(0, b"")] * (W_NR - 3)
    keys = [f[:HDR_LEN] for f in good]
    for use_c in (True, False):
        # every key stored: all three forwarded at once, the slots handed back
        stored = [(k, pipe.decide_header(k, 0)) for k in keys]
        got = run_wake(use_c, slots_data, 0, 16, 64, stored, [10**6] * 3, ["ok"] * 3)
        n, res, _out, received = got[:4]
        want = [new_pipe().process(f, 0) for f in good]
        assert n == 3 and res == {"n": 3, "misses": 0, "n_defer": 0, "released": 1,
                                  "n_sent_ports": 2, "rx_bytes": sum(map(len, good)),
                                  "drops": 0}  # fmt: skip
        assert received[1] == [bytes(want[0].frame), bytes(want[2].frame)]
        assert received[2] == [bytes(want[1].frame)]
        assert got[4][0:4] == bytes(4)  # TP_STATUS_KERNEL again
        # one miss: nothing applied, sent or released
        got = run_wake(use_c, slots_data, 0, 16, 64, stored[:2], [10**6] * 3, ["ok"] * 3)
        assert got[1] == dict.fromkeys(got[1], 0) | {"n": 3, "misses": 1}
        assert got[3] == [[], [], []]
        assert got[4] == bytes(mmap_ring(use_c, slots_data, 0, 16).view)
        # a down port (budget -1) sends nothing: its frames are deferred to Python
        got = run_wake(use_c, slots_data, 0, 16, 64, stored, [10**6, -1, 10**6], ["ok"] * 3)
        assert (got[1]["n_defer"], got[1]["released"], got[1]["n_sent_ports"]) == (2, 0, 1)
        assert got[8] == [0, 2] and got[2] == [(2, 1, 0, False, len(want[1].frame))]


def test_wake_refills_budgets_like_the_token_bucket():
    pipe = new_pipe()
    f = frame(addr(OWN, B), payload=b"r" * 60)
    slots_data = [(1, f), (1, f)] + [(0, b"")] * (W_NR - 2)
    stored = [(f[:HDR_LEN], pipe.decide_header(f[:HDR_LEN], 0))]
    # port 1 had budget 0 at t=1000; 1 byte/ns for 1.5 frames' time: one sent, one deferred;
    # a queued port (-1) earns nothing; the burst caps what is earned
    for use_c in (True, False):
        t = 1000 + len(f) * 3 // 2
        bucket = ((1.0, 10**6, 1000), (1.0, 10**6, 1000), (1.0, 10**6, 1000))
        got = run_wake(use_c, slots_data, 0, 16, 64, stored, [0, 0, -1], ["ok"] * 3, bucket, t)
        assert got[7] == [SEND, QUEUE] and got[10] == [t - 1000, -1, -1]
        assert got[13] == [t, t, 1000]
        bucket = ((1.0, 10, 1000), (1.0, 10, 1000), (1.0, 10, 1000))
        got = run_wake(use_c, slots_data, 0, 16, 64, stored, [5, 0, 3], ["ok"] * 3, bucket, t)
        assert got[7] == [QUEUE, QUEUE] and got[10] == [10, -1, 10]


def test_decision_cache_is_bounded_and_evicts():
    for use_c in (True, False):
        cache = DecisionCache(8, use_c=use_c)
        keys = [i.to_bytes(HDR_LEN, "big") for i in range(40)]
        for i, k in enumerate(keys):
            cache.insert(k, -i)
            assert cache.get(k) == -i  # the newest is always there
        assert len(cache) == 8
        assert sum(cache.get(k) is not None for k in keys) == 8
        with pytest.raises(ValueError):
            cache.insert(b"short", 1)
    with pytest.raises(ValueError):
        DecisionCache(6)
