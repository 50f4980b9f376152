"""The floor of ``bench/bench_lab_cpu.py``: what moving the lab's frames costs with no NIC and
no switch process, only the kernel.

One process per end, each in its host's namespace, one thread per port, each thread a loop
of ``csrc/mrc_raw.c``:

- ``send``: every port sends one prepared data frame (a full-MTU frame its plane's kernel
  switches route to the other host) over and over, **paced at the link rate** and woken at
  most once per tick (as a NIC pacer is), with ``sendmmsg``;
- ``recv``: every port counts what arrives (``recvmmsg``, as the NIC's receive does).

Each prints one JSON line (the receiver first a ``ready`` line): frames, CPU-seconds of the
process, elapsed time.

    python -m lab.workloads.bench.floor recv --ifnames mrcswc-p0,... --seconds 6
    python -m lab.workloads.bench.floor send --ifnames ... --frames FILE --rate-fps 598 ...
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from lab.proc.cpu import process_cpu_s
from mrcnic.io.afpacket import open_rx_socket, open_tx_socket

TICK_S = 1e-3  # the NIC's pacing tick (mrcnic.io.aio.PACE_TICK_S)


def _emit(d: dict[str, Any]) -> None:
    print(json.dumps(d), flush=True)


def raw_loops(fn_name: str, socks: list[Any], fields: list[dict[str, Any]]) -> dict[str, Any]:
    """Run one mrc_raw loop per socket, each in its own thread (the C loop releases the GIL)."""
    from mrcnic import _mrcfast  # the C core only: a pure-Python build has no floor

    ffi, lib = _mrcfast.ffi, _mrcfast.lib
    cfgs = [
        ffi.new("struct mrc_raw_cfg *", {"fd": s.fileno(), **f})
        for s, f in zip(socks, fields, strict=True)
    ]
    ress = [ffi.new("struct mrc_raw_result *") for _ in socks]
    rcs = [0] * len(socks)

    def one(i: int) -> None:
        rcs[i] = getattr(lib, fn_name)(cfgs[i], ress[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(socks))]
    c0 = process_cpu_s()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c1 = process_cpu_s()
    for s in socks:
        s.close()
    bad = [r for r in rcs if r < 0]
    return {
        "frames": sum(r.frames for r in ress),
        "frames_per_port": [r.frames for r in ress],
        "bytes": sum(r.bytes for r in ress),
        "errors": sum(r.errors for r in ress),
        "calls": sum(r.calls for r in ress),
        "cpu_s": c1 - c0,
        "elapsed_s": max(r.elapsed_ns for r in ress) / 1e9,
        "failed": bad,
    }


def send(ifnames: list[str], frames: list[bytes], rate_fps: float, seconds: float) -> dict:
    from mrcnic import _mrcfast

    bufs = [_mrcfast.ffi.new("uint8_t[]", f) for f in frames]  # alive until the loops return
    fields = [
        {
            "frame": b,
            "frame_len": len(f),
            "batch": 64,
            "duration_ns": int(seconds * 1e9),
            "rate_fps": rate_fps,
            "tick_ns": int(TICK_S * 1e9),
        }  # fmt: skip
        for b, f in zip(bufs, frames, strict=True)
    ]
    socks = [open_tx_socket(n) for n in ifnames]
    return {"role": "floor-send", "rate_fps_per_port": rate_fps,
            **raw_loops("mrc_raw_send", socks, fields)}  # fmt: skip


def recv(ifnames: list[str], seconds: float) -> dict:
    socks = [open_rx_socket(n) for n in ifnames]
    fields = [
        {"duration_ns": int(seconds * 1e9), "block_nr": 0, "batch": 64, "slot_len": 9216}
        for _ in ifnames
    ]
    _emit({"role": "floor-recv", "ready": True})
    return {"role": "floor-recv", **raw_loops("mrc_raw_recv", socks, fields)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lab.workloads.bench.floor", description=__doc__.split("\n")[0]
    )
    ap.add_argument("role", choices=["send", "recv"])
    ap.add_argument("--ifnames", required=True, help="the host's ports, comma-separated")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--frames", help="send: a JSON file, one hex frame per port, in order")
    ap.add_argument("--rate-fps", type=float, default=0.0, help="send: frames/s per port")
    a = ap.parse_args(argv)
    ifnames = [n for n in a.ifnames.split(",") if n]
    if a.role == "recv":
        _emit(recv(ifnames, a.seconds))
        return 0
    if not a.frames or a.rate_fps <= 0:
        ap.error("send needs --frames FILE and --rate-fps > 0")
    with open(a.frames) as f:
        frames = [bytes.fromhex(x) for x in json.load(f)]
    if len(frames) != len(ifnames):
        ap.error(f"{len(frames)} frames for {len(ifnames)} ports")
    _emit(send(ifnames, frames, a.rate_fps, a.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
