"""The benchmark's out-of-band control channel: JSON messages over one TCP connection.

MRC has no connection manager (no RDMA-CM): QP attributes, the remote buffer, start/stop and
the verification travel out of band.  In the lab that is the management network (a bridge
that never carries MRC traffic; ``lab.plan.mgmt_address(h)``).  One message per line, each a
JSON object with a ``"type"``; a peer that fails sends ``{"type": "error", "message": ...}``,
which the other side raises as :class:`ControlError`.

    ch = await control.connect(addr, port)              # client (retries until listening)
    await ch.send("hello", qps=[...])
    reply = await ch.recv("ready")                      # ControlError on anything else

    server = await control.listen(addr, port)           # server: one client
    ch = await server.accept()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from mrcnic.errors import MrcError

PROTOCOL_VERSION = 1
DEFAULT_PORT = 18515  # perftest's default port
MAX_LINE = 1 << 24  # attributes of many QPs fit easily; anything bigger is a bug


class ControlError(MrcError, RuntimeError):
    """The control channel failed or the peer reported an error."""


class Channel:
    """One connected peer: ``send(type, **fields)`` and ``recv(expect)``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"[{peer[0]}]:{peer[1]}" if peer else "?"

    async def send(self, kind: str, **fields: Any) -> None:
        msg = {"type": kind, **fields}
        self.writer.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        try:
            await self.writer.drain()
        except (ConnectionError, OSError) as e:
            raise ControlError(f"control channel to {self.peer}: {e}") from None

    async def recv(self, expect: str | None = None, timeout_s: float | None = None) -> dict:
        """The next message (of type ``expect`` if given); ControlError on EOF, timeout, an
        error message from the peer, or another type."""
        try:
            line = await asyncio.wait_for(self.reader.readline(), timeout_s)
        except TimeoutError:
            raise ControlError(
                f"control channel to {self.peer}: no {expect or 'message'} within {timeout_s} s"
            ) from None
        except (ConnectionError, OSError, ValueError) as e:
            raise ControlError(f"control channel to {self.peer}: {e}") from None
        if not line:
            raise ControlError(
                f"control channel to {self.peer}: closed while waiting for {expect or 'a message'}"
            )
        try:
            msg = json.loads(line)
        except ValueError:
            raise ControlError(f"control channel to {self.peer}: not JSON: {line[:80]!r}") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise ControlError(f"control channel to {self.peer}: message without a type")
        if msg["type"] == "error":
            raise ControlError(f"peer {self.peer} reported: {msg.get('message', '?')}")
        if expect is not None and msg["type"] != expect:
            raise ControlError(
                f"control channel to {self.peer}: expected {expect!r}, got {msg['type']!r}"
            )
        return msg

    async def fail(self, message: str) -> None:
        """Tell the peer why we stop (best effort)."""
        with contextlib.suppress(ControlError, ConnectionError, OSError):
            await self.send("error", message=message)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Listener:
    """A listening socket handing out accepted connections as :class:`Channel`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Channel] = asyncio.Queue()
        self.server: asyncio.base_events.Server | None = None

    async def _on_client(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await self._queue.put(Channel(r, w))

    async def accept(self, timeout_s: float | None = None) -> Channel:
        try:
            return await asyncio.wait_for(self._queue.get(), timeout_s)
        except TimeoutError:
            raise ControlError(f"no client connected within {timeout_s} s") from None

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def listen(host: str | None, port: int) -> Listener:
    """Listen on ``host`` (None: every address) and ``port`` (0: any free port)."""
    lst = Listener()
    try:
        lst.server = await asyncio.start_server(
            lst._on_client, host, port, reuse_address=True, limit=MAX_LINE
        )
    except OSError as e:
        raise ControlError(f"cannot listen on [{host or '::'}]:{port}: {e.strerror or e}") from None
    return lst


async def connect(host: str, port: int, timeout_s: float = 15.0) -> Channel:
    """Connect, retrying while the server is not listening yet (it may still be starting)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            r, w = await asyncio.open_connection(host, port, limit=MAX_LINE)
            return Channel(r, w)
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise ControlError(f"cannot connect to [{host}]:{port} within {timeout_s} s: {last}")
        await asyncio.sleep(0.05)
