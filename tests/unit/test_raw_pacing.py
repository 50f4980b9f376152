"""csrc/mrc_raw.c's paced sender (the floor of bench/bench_lab_cpu.py): never faster than its
rate, a tick's frames per send, and its arguments checked."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from mrcnic.transport.rx_engine import c_module

_m = c_module()
needs_c = pytest.mark.skipif(_m is None, reason="the C module is not built")


def _send(sock: socket.socket, **fields: object) -> tuple[int, object]:
    ffi, lib = _m.ffi, _m.lib
    frame = ffi.new("uint8_t[]", b"x" * 64)
    cfg = ffi.new(
        "struct mrc_raw_cfg *",
        {"fd": sock.fileno(), "frame": frame, "frame_len": 64, "batch": 64, **fields},
    )
    res = ffi.new("struct mrc_raw_result *")
    return lib.mrc_raw_send(cfg, res), res


@needs_c
def test_a_paced_send_never_outruns_its_rate_and_batches_per_tick() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    got = [0]

    def drain() -> None:  # (a unix socket queues only a few datagrams: keep it empty)
        b.settimeout(0.2)
        with contextlib.suppress(OSError):
            while b.recv(128):
                got[0] += 1

    t = threading.Thread(target=drain)
    t.start()
    try:
        rate, tick_ns = 1000.0, 5_000_000
        rc, res = _send(a, duration_ns=300_000_000, rate_fps=rate, tick_ns=tick_ns)
        assert rc == 0
        offered = res.frames + res.errors
        # by construction: at most the frames due by the end (one ahead of the clock)
        assert offered <= rate * res.elapsed_ns / 1e9 + 1
        assert offered >= 0.5 * rate * res.elapsed_ns / 1e9  # (a starved machine: generous)
        # a send per tick (rate x tick = 5 frames each), not one per frame. A tick may take two
        # calls when the socket is full (a partial send: the drain thread starved by a second
        # test worker), so the bound is twice the ticks: still well under one call per frame.
        ticks = res.elapsed_ns / tick_ns
        assert res.calls <= 2 * ticks + 4 < offered
    finally:
        a.close()
        t.join()
        b.close()
    assert got[0] == res.frames


@needs_c
@pytest.mark.parametrize("bad", [{"rate_fps": -1.0}, {"rate_fps": float("nan")}, {"tick_ns": -1}])
def test_bad_pacing_arguments_are_refused(bad: dict) -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        rc, res = _send(a, duration_ns=1_000_000, **bad)
        assert rc == -22 and res.frames == 0  # -EINVAL, nothing sent
    finally:
        a.close()
        b.close()


def test_the_floor_sender_refuses_what_it_cannot_send(tmp_path, capsys) -> None:
    from lab.workloads.bench import floor

    with pytest.raises(SystemExit):
        floor.main(["send", "--ifnames", "p0,p1"])  # no frames, no rate
    assert "needs --frames" in capsys.readouterr().err
    f = tmp_path / "frames.json"
    f.write_text('["00"]')
    with pytest.raises(SystemExit):
        floor.main(["send", "--ifnames", "p0,p1", "--frames", str(f), "--rate-fps", "10"])
    assert "1 frames for 2 ports" in capsys.readouterr().err
