"""One process serving several switches: ``mrc-switch --config A --config B ... [--control S]``.

Each switch keeps what it has alone (its config, ports, static table, decision caches,
egress queues, counters and stats file; its ports opened in its own namespace, the config's
``netns``); the process shares one epoll set and one event loop among them. With the C loop
(``mrc_sw_group_poll``) a frame that one switch of the process sends to another lands in the
other's receive ring during the send, so the same wake-up forwards it again: the frame
crosses every switch of the process on one wake-up instead of waking a process per hop.
The Python loop (``MRC_SWITCH_C_LOOP=0``, or no C) is its twin: the same epoll set, each
ready fd handed to its switch.

The control socket (``--control PATH``, a unix stream socket) takes one JSON line per
connection and answers one: ``{"op": "stop", "switch": NAME}`` stops exactly that switch
(its sockets closed, a last stats file with ``"ready": false``), ``{"op": "start",
"switch": NAME}`` starts it again from its config file (a switch reboot), ``{"op":
"delay", "switch": NAME, "port": PORT, "delay_ns": N}`` sets the one-way delay of the link
out of that port (until the switch restarts from its config), ``{"op": "list"}`` lists the
switches and whether each runs. SIGTERM or SIGINT stops them all.

Opening and closing AF_PACKET sockets with rings waits for RCU grace periods in the kernel:
about 75 ms to close a T1's ports and 25-50 ms to open them on the project's machines. The
other switches of the process must not stop forwarding meanwhile (a reboot of one T1 showed
as a dip of the whole fabric), so both happen in helper threads without the GIL: a stopped
switch's ports close in the background once they are out of the loop, and a start opens
the ports first and answers the control request when the switch runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import threading
import time
from pathlib import Path

from . import cloop
from .config import ConfigError, load_config
from .process import TIMER_SLACK_NS, hold_ns_from_env, listen_unix, stop_signals_wake
from .switch import Switch

log = logging.getLogger("mrc-switch")

# Periodic work of switches due within this is done together; the switches' phases are
# spread over their intervals (Switch.set_phase), so this only merges near-coincident work
# and one wake-up never does many switches' stats at once.
TICK_SLACK_NS = 1_000_000
CONTROL_TIMEOUT_S = 2.0


class SwitchHost:
    """The switches of ``configs`` (config file paths) in this process."""

    def __init__(self, configs: list[str], control_path: str | None = None) -> None:
        self.paths: dict[str, str] = {}  # name -> config path (a restart reads it again)
        self.switches: dict[str, Switch] = {}  # the running ones, in config order
        self.order: list[str] = []
        self.control_path = control_path
        self.hold_ns = hold_ns_from_env()
        self._ep = select.epoll()
        self._owners: dict[int, Switch] = {}  # fd -> its switch
        self._stop = False
        self._wake_r = self._wake_w = -1
        self._ctl: socket.socket | None = None
        self._group: cloop.CGroup | None = None
        self._members: list[Switch] = []
        # name -> (the switch being started, its port-opening thread, connections to answer)
        # switch name -> (switch, its port-opening thread, that thread's "done" flag, the
        # requests to answer when it runs)
        self._starting: dict[
            str, tuple[Switch, threading.Thread, threading.Event, list[socket.socket]]
        ] = {}
        self._closers: list[threading.Thread] = []  # ports of stopped switches, closing
        self._use_c = os.environ.get("MRC_SWITCH_C_LOOP", "1") != "0"
        self._cfgs = []
        for path in configs:
            cfg = load_config(path)  # ConfigError: the caller reports it
            if cfg.name in self.paths:
                raise ConfigError("name", f"{cfg.name!r} is given twice ({path})")
            self.paths[cfg.name] = str(Path(path).resolve())
            self.order.append(cfg.name)
            self._cfgs.append(cfg)

    # --- switches -------------------------------------------------------------------------
    def _switch_object(self, name: str, cfg=None) -> Switch:
        if cfg is None:
            cfg = load_config(self.paths[name])  # its static config, read again
        sw = Switch(cfg, self.paths[name], epoll=self._ep, owners=self._owners,
                    hold_ns=self.hold_ns)  # fmt: skip
        sw._host_counters = self._counters
        return sw

    def _new_switch(self, name: str, cfg=None, sw: Switch | None = None) -> Switch:
        """The switch with its ports open and in the loop (``sw``: one whose sockets
        :meth:`Switch.prepare_ports` opened already)."""
        if sw is None:
            sw = self._switch_object(name, cfg)
        try:
            sw.write_stats()  # "ready": false until every port is open
            sw.open_ports()
        except BaseException:
            sw.close()
            raise
        return sw

    def open(self) -> None:
        """Open every switch's ports (ConfigError names the switch and the field)."""
        for name, cfg in zip(self.order, self._cfgs, strict=True):
            try:
                self.switches[name] = self._new_switch(name, cfg)
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc.field}", exc.reason) from None
        self._cfgs = []
        self._members = list(self.switches.values())
        if self._use_c and all(sw.cloop is not None for sw in self.switches.values()):
            self._group = cloop.CGroup(
                self._ep.fileno(), self._loops(), timer_slack_ns=TIMER_SLACK_NS,
                hold_ns=self.hold_ns,
            )  # fmt: skip

    def _loops(self) -> list:
        return [sw.cloop for sw in self.switches.values()]

    def _members_changed(self) -> None:
        self._members = list(self.switches.values())  # the group's order
        if self._group is not None:
            self._group.set_members(self._loops())

    def stop_switch(self, name: str) -> str:
        """Stop exactly one switch: "stopped" or "not running"."""
        sw = self.switches.pop(name, None)
        if sw is None:
            return "not running"
        self._members_changed()
        try:
            sw.finish()
        finally:
            sw.close(closer=self._close_later)
        log.info("%s stopped", name)
        return "stopped"

    def _close_later(self, ports: list) -> None:
        t = threading.Thread(target=_close_ports, args=(ports,), name="port-closer", daemon=True)
        t.start()
        self._closers = [c for c in self._closers if c.is_alive()] + [t]

    def start_switch(self, name: str, sw: Switch | None = None) -> str:
        """Start one stopped switch from its config file: "started" or "running" (``sw``:
        the switch object whose ports a helper thread opened)."""
        if name in self.switches:
            if sw is not None:
                sw.close()
            return "running"
        sw = self._new_switch(name, sw=sw)
        if self._group is not None and sw.cloop is None:
            sw.close()
            raise ConfigError("(switch)", "its ports cannot run on the C loop of this process")
        sw.start()
        # config order, so that the group serves switches in a stable order
        self.switches[name] = sw
        self.switches = {n: self.switches[n] for n in self.order if n in self.switches}
        self._members_changed()
        return "started"

    def _counters(self) -> dict:
        c = self._group.counters() if self._group is not None else {}
        return {**c, "switches_in_process": len(self.switches)}

    # --- control ----------------------------------------------------------------------------
    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = stop_signals_wake(self._ep, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        self._stop = True

    def _open_control(self) -> None:
        if not self.control_path:
            return
        self._ctl = listen_unix(self.control_path)
        self._ep.register(self._ctl.fileno(), select.EPOLLIN)

    def command(self, msg: dict) -> dict:
        """One control request -> its answer."""
        op = msg.get("op")
        name = msg.get("switch")
        if op == "list":
            return {"ok": True, "switches": {n: n in self.switches for n in self.order}}
        if op not in ("stop", "start", "delay"):
            return {"ok": False, "error": f"unknown op {op!r} (stop, start, delay, list)"}
        if name not in self.paths:
            return {"ok": False, "error": f"no switch {name!r} in this process"}
        if op == "delay":
            sw = self.switches.get(name)
            if sw is None:
                return {"ok": False, "error": f"{name} is stopped"}
            try:
                done = sw.set_delay(str(msg.get("port")), msg.get("delay_ns"))  # type: ignore[arg-type]
            except ValueError as exc:
                return {"ok": False, "error": str(exc)}
            return {"ok": True, "switch": name, "result": done}
        try:
            result = self.stop_switch(name) if op == "stop" else self.start_switch(name)
        except (ConfigError, OSError) as exc:
            return {"ok": False, "error": f"{name}: {exc}"}
        return {"ok": True, "switch": name, "result": result}

    def _serve_control(self) -> None:
        assert self._ctl is not None
        while True:
            try:
                conn, _ = self._ctl.accept()
            except (BlockingIOError, InterruptedError):
                return
            try:
                conn.settimeout(CONTROL_TIMEOUT_S)
                line = conn.makefile("rb").readline(65536)
                try:
                    msg = json.loads(line)
                    if not isinstance(msg, dict):
                        raise ValueError("not an object")
                    if self._begin_start(msg, conn):
                        continue  # answered when the switch runs (_finish_starts)
                    reply = self.command(msg)
                except ValueError as exc:
                    reply = {"ok": False, "error": f"bad request: {exc}"}
                _answer(conn, reply)
            except OSError:
                conn.close()

    def _begin_start(self, msg: dict, conn: socket.socket) -> bool:
        """A "start" of a stopped switch: its ports open in a helper thread while the loop
        keeps forwarding for the others; ``conn`` is answered when it runs. False: not such
        a request (:meth:`command` answers it now)."""
        name = msg.get("switch")
        if msg.get("op") != "start" or name not in self.paths or name in self.switches:
            return False
        if name in self._starting:
            self._starting[name][3].append(conn)
            return True
        try:
            sw = self._switch_object(name)
        except (ConfigError, OSError):
            return False  # command() reports it

        done = threading.Event()

        def prepare() -> None:
            try:
                sw.prepare_ports()
            finally:
                # "done" before the wake: the loop may read the byte while this thread is
                # still alive, and is_alive() then said "not yet" and no byte came again (a
                # start answered only by the next start, or never: 30 s control timeouts)
                done.set()
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"s")

        t = threading.Thread(target=prepare, name=f"start-{name}", daemon=True)
        self._starting[name] = (sw, t, done, [conn])
        t.start()
        return True

    def _finish_starts(self) -> None:
        """Switches whose ports are open join the loop; their requests are answered."""
        for name, (sw, t, done, conns) in list(self._starting.items()):
            if not done.is_set():
                continue
            t.join()  # it has nothing left to do but return
            del self._starting[name]
            try:
                reply = {"ok": True, "switch": name, "result": self.start_switch(name, sw)}
            except (ConfigError, OSError) as exc:
                reply = {"ok": False, "error": f"{name}: {exc}"}
            for conn in conns:
                with contextlib.suppress(OSError):
                    _answer(conn, reply)

    def _on_other_fd(self, fd: int) -> None:
        if fd == self._wake_r:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 512)
            if self._starting:
                self._finish_starts()
        elif self._ctl is not None and fd == self._ctl.fileno():
            self._serve_control()
        else:
            sw = self._owners.get(fd)
            if sw is not None:
                sw.on_other_fd(fd)

    def _serve_other_fds(self) -> None:
        """Every ready fd that is no port (the C loop leaves them to us)."""
        for fd, _ev in self._ep.poll(0):
            sw = self._owners.get(fd)
            if sw is None or fd not in sw._by_fd:
                self._on_other_fd(fd)

    # --- the loop ---------------------------------------------------------------------------
    def _due(self) -> int:
        return min(
            (sw.due_ns for sw in self.switches.values()), default=time.monotonic_ns() + 10**9
        )

    def _tick(self, now: int) -> None:
        soon = now + TICK_SLACK_NS
        for sw in list(self.switches.values()):
            if sw.due_ns <= soon:
                sw.tick(max(now, sw.due_ns))

    def run(self) -> None:
        self._install_signals()
        self._open_control()
        n = len(self.switches)
        for k, sw in enumerate(self.switches.values()):
            sw.start()
            sw.set_phase(k / n)
        log.info(
            "%d switches in this process (pid %d), %s loop, hold %d us",
            len(self.switches),
            os.getpid(),
            "C" if self._group is not None else "Python",
            self.hold_ns // 1000,
        )
        try:
            if self._group is not None:
                self._run_c()
            else:
                self._run_python()
        finally:
            for sw in self.switches.values():
                sw.finish()

    def _run_c(self) -> None:
        g = self._group
        assert g is not None
        ev = g.event
        monotonic_ns = time.monotonic_ns
        while not self._stop:
            why = g.poll(self._due())
            now = monotonic_ns()
            if why is cloop.Wake.OTHER_FD:
                self._serve_other_fds()
            elif why is not cloop.Wake.DEADLINE and why is not cloop.Wake.EINTR:
                self._members[ev.sw].on_c_wake(why, ev, now)  # the loop's index: in range
            if now >= self._due():
                for sw in self.switches.values():
                    sw.on_c_wake(cloop.Wake.DEADLINE, ev, now)  # ports the loop downed
                self._tick(now)

    def _run_python(self) -> None:
        poll = self._ep.poll
        owners = self._owners
        monotonic_ns = time.monotonic_ns
        now = monotonic_ns()
        while not self._stop:
            due = self._due()
            nxt = min((sw.timeout_ns(now, due) for sw in self.switches.values()), default=due)
            for fd, ev in poll(max(0.0, (nxt - now) / 1e9)):
                sw = owners.get(fd)
                if sw is not None:
                    sw.on_fd(fd, ev)
                else:
                    self._on_other_fd(fd)
            now = monotonic_ns()
            for sw in list(self.switches.values()):
                sw.serve_queues(now)
            if now >= self._due():
                self._tick(now)

    def close(self) -> None:
        for sw in self.switches.values():
            sw.close()
        self.switches = {}
        for sw, t, _done, conns in self._starting.values():
            t.join()
            sw.close()
            for conn in conns:
                conn.close()
        self._starting = {}
        for t in self._closers:
            t.join()
        self._closers = []
        if self._ctl is not None:
            self._ctl.close()
            self._ctl = None
            if self.control_path:
                Path(self.control_path).unlink(missing_ok=True)
        self._ep.close()


def _answer(conn: socket.socket, reply: dict) -> None:
    try:
        conn.sendall(json.dumps(reply).encode() + b"\n")
    finally:
        conn.close()


def _close_ports(ports: list) -> None:
    for p in ports:
        try:
            p.close()
        except OSError as exc:  # pragma: no cover - close does not fail on these sockets
            log.warning("port %s: close failed: %s", p.cfg.name, exc)


def control(path: str, msg: dict, timeout_s: float = 30.0) -> dict:
    """Send one request to a hosting process's control socket; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(path)
        s.sendall(json.dumps(msg).encode() + b"\n")
        data = s.makefile("rb").readline(1 << 20)
    return json.loads(data)
