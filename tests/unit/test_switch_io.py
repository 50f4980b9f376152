"""csrc/mrc_io.c vs its Python twin (mrcnic.io.batch) over AF_UNIX datagram pairs."""

from __future__ import annotations

import errno
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.io import batch as batch_io

pytestmark = pytest.mark.skipif(batch_io.BACKEND != "c", reason="C module mrc_io not built")


def roundtrip(frames, use_c_send, use_c_recv, slot=128, slots=16):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    with a, b:
        res = batch_io.Sender(use_c=use_c_send).send(a, frames)
        ring = batch_io.RecvRing(slot, slots, use_c=use_c_recv)
        got = []
        while True:
            n = ring.recv(b)
            assert n >= 0
            if n == 0:
                break
            got += [(ring.lens[i], bytes(ring.frame(i))) for i in range(n)]
    return (res.sent, res.failed), got


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=40))
def test_c_and_twin_agree(frames):
    results = {(sc, rc): roundtrip(frames, sc, rc) for sc in (True, False) for rc in (True, False)}
    first = results[(True, True)]
    assert all(r == first for r in results.values())
    sent, got = first
    assert sent == (len(frames), 0)
    assert [ln for ln, _ in got] == [len(f) for f in frames]  # real length, even when cut
    assert [data for _, data in got] == [f[:128] for f in frames]


def test_recv_on_empty_socket_returns_zero_and_errors_are_negative():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        for use_c in (True, False):
            assert batch_io.RecvRing(64, 4, use_c=use_c).recv(b) == 0
    bad_fd = 10_000
    for use_c in (True, False):
        assert batch_io.RecvRing(64, 4, use_c=use_c).recv(bad_fd) == -errno.EBADF


def test_send_to_closed_peer_counts_failures():
    for use_c in (True, False):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        b.close()
        with a:
            r = batch_io.Sender(use_c=use_c).send(a, [b"x", b"y", b"z"])
        assert (r.sent, r.failed) == (0, 3) and r.errno != 0


def test_ring_refuses_bad_geometry():
    with pytest.raises(ValueError):
        batch_io.RecvRing(0, 4)
    with pytest.raises(ValueError):
        batch_io.RecvRing(64, batch_io.MAX_BATCH + 1)
