"""The ``mrc-switch`` command line: ``mrc-switch --config FILE`` runs one switch
(:class:`mrcswitch.switch.Switch`), ``--config`` more than once or ``--control`` several in
one process (:class:`mrcswitch.host.SwitchHost`); ``python -m mrcswitch.main`` is the same.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from mrcnic.io.realtime import RealtimeError, enter_realtime, hold_cpu_latency

from .config import ConfigError, load_config
from .host import SwitchHost, control
from .switch import Switch

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
NETNS_DIR = "/run/netns"  # where `ip netns` names namespaces


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="mrc-switch",
        description="Run one SRv6 uSID software switch in this netns (or several in one "
        "process: --config more than once, each config naming its netns).",
    )
    ap.add_argument(
        "--config", action="append",
        help="TOML or JSON (.json) switch config; more than once: one process serves them all",
    )  # fmt: skip
    ap.add_argument("--check", action="store_true", help="validate the config(s) and exit")
    ap.add_argument(
        "--control", default=None,
        help="unix socket taking stop/start/delay/list requests for single switches (JSON "
        "lines); "
        "implies the serving of several switches even with one --config",
    )  # fmt: skip
    ap.add_argument(
        "--request", metavar="JSON",
        help="with --control: send this one request to a running process and print its "
        "answer, e.g. '{\"op\": \"delay\", \"switch\": \"p0-t1-0\", \"port\": \"dn0\", "
        "\"delay_ns\": 2000000}' (ops: stop, start, delay, list); exit 1 if refused",
    )  # fmt: skip
    ap.add_argument(
        "--realtime", action="store_true",
        help="run SCHED_FIFO (priority 1) and keep idle CPUs polling (a PM QoS request of "
        "0 us) while serving: a woken switch waits less for a CPU (docs/lab.md, REAL-TIME; "
        "needs root)",
    )  # fmt: skip
    ap.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
        help="DEBUG, INFO, WARNING or ERROR (default INFO)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.request is not None:
        return _request(ap, args)
    if not args.config:
        ap.error("--config is required (or --control SOCK --request JSON)")
    if args.check:
        return _check(args.config)
    with contextlib.ExitStack() as held:
        if args.realtime:
            try:
                enter_realtime()  # (first: a refusal leaves the machine as it was)
                held.enter_context(hold_cpu_latency(0))  # the PM QoS request: while we serve
            except RealtimeError as exc:
                print(f"mrc-switch: --realtime: {exc}", file=sys.stderr)
                return 2
        logging.basicConfig(
            level=getattr(logging, args.log_level),
            format="%(asctime)s mrc-switch %(levelname)s %(message)s",
            stream=sys.stderr,
        )
        return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    """The switch or switches of ``args.config``, until stopped."""
    if len(args.config) > 1 or args.control:
        return _main_host(args)
    path = args.config[0]
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        print(f"mrc-switch: bad config {path}: {exc}", file=sys.stderr)
        return 2
    sw = Switch(cfg, str(Path(path).resolve()))
    try:
        sw.write_stats()  # "ready": false until every port is open
        sw.open_ports()
        sw.run()
    except ConfigError as exc:
        print(f"mrc-switch: bad config {path}: {exc}", file=sys.stderr)
        return 2
    finally:
        sw.close()
    return 0


def _check(paths: list[str]) -> int:
    """``--check``: each config on its own, then what only the set shows (a switch name or
    a namespace's interface given twice) and namespaces that do not exist here."""
    names: dict[str, str] = {}
    ports: dict[tuple[str, str], str] = {}
    for path in paths:
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            print(f"mrc-switch: bad config {path}: {exc}", file=sys.stderr)
            return 2
        problem = None
        if cfg.name and cfg.name in names:
            problem = f"switch name {cfg.name!r} is also the name in {names[cfg.name]}"
        elif cfg.netns and not os.path.exists(os.path.join(NETNS_DIR, cfg.netns)):
            problem = f"network namespace {cfg.netns!r} does not exist ({NETNS_DIR}/{cfg.netns})"
        else:
            for port in cfg.ports:
                key = (cfg.netns, port.interface)
                if key in ports:
                    where = f"namespace {cfg.netns}" if cfg.netns else "this namespace"
                    problem = (
                        f"interface {port.interface} of {where} is also a port in {ports[key]}"
                    )
                    break
                ports[key] = path
        if problem:
            print(f"mrc-switch: bad config {path}: {problem}", file=sys.stderr)
            return 2
        names[cfg.name] = path
        print(f"mrc-switch: {path}: OK ({len(cfg.ports)} ports, {len(cfg.table)} routes)")
    return 0


def _request(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """One control request to a running process (mrcswitch.host.control)."""
    if not args.control or args.config:
        ap.error("--request goes with --control SOCK and no --config")
    try:
        msg = json.loads(args.request)
    except ValueError as exc:
        ap.error(f"--request: not JSON: {exc}")
    if not isinstance(msg, dict):
        ap.error('--request: must be a JSON object, e.g. \'{"op": "list"}\'')
    try:
        reply = control(args.control, msg)
    except (OSError, ValueError) as exc:
        print(f"mrc-switch: control socket {args.control}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(reply))
    return 0 if reply.get("ok") else 1


def _main_host(args: argparse.Namespace) -> int:
    """Several switches in this process (mrcswitch.host)."""
    try:
        host = SwitchHost(args.config, args.control)
    except ConfigError as exc:
        print(f"mrc-switch: bad config: {exc}", file=sys.stderr)
        return 2
    try:
        host.open()
        host.run()
    except ConfigError as exc:
        print(f"mrc-switch: bad config: {exc}", file=sys.stderr)
        return 2
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
