"""A namespace's links, root qdiscs and nft tables read over netlink, in-process.

:func:`lab.fabric.status.read_namespace` asks ``ip -j -s link``, ``tc -j -s qdisc`` and ``nft -j list
tables`` in every namespace: three processes per namespace, about 80 ms of CPU for a 13-namespace
lab, which ``mrc-lab top`` would pay every refresh of the faults. The same facts come from three
netlink dumps (RTM_GETLINK, RTM_GETQDISC, NFT_MSG_GETTABLE) on sockets opened inside the
namespace, with no process started: well under a millisecond per namespace. The result is a
:class:`lab.fabric.status.NsView` with the fields :func:`lab.fabric.status.link_status`,
:func:`lab.fabric.status.node_status` and :func:`lab.fabric.status.end_faults` read (link flags and operstate,
a root qdisc's kind and tbf rate in bytes/s as ``tc -j`` reports it, table names), so faults are
judged by the same code as ``mrc-lab status``. No counters (``-s``): kernel-switch counters
still come from :func:`lab.fabric.status.read_namespace`.
"""

from __future__ import annotations

import errno
import socket
import struct
from typing import Any

from lab.fabric.status import NsView
from mrcnic.io.netns import in_netns

NETLINK_ROUTE = 0
NETLINK_NETFILTER = 12
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
IFLA_IFNAME, IFLA_OPERSTATE = 3, 16
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_RATE64 = 1, 4
TC_H_ROOT = 0xFFFFFFFF
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWTABLE, NFT_MSG_GETTABLE = 0, 1
NFTA_TABLE_NAME = 1

_NLMSG = struct.Struct("=IHHII")
_IFINFO = struct.Struct("=BxHiII")
_TCMSG = struct.Struct("=BxxxiIII")
_NFGEN = struct.Struct("=BBH")
_RTA = struct.Struct("=HH")

#: IFF_* flags as ``ip -j link`` names them
_FLAGS = ((0x1, "UP"), (0x2, "BROADCAST"), (0x8, "LOOPBACK"), (0x1000, "MULTICAST"),
          (0x10000, "LOWER_UP"), (0x20000, "DORMANT"))  # fmt: skip
_OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")


def dump(sock: socket.socket, msg_type: int, payload: bytes) -> list[tuple[int, bytes]]:
    """One netlink dump: ``(type, body)`` of every message up to NLMSG_DONE. An error reply
    raises OSError (ENOENT / EOPNOTSUPP when the subsystem is not there)."""
    sock.send(_NLMSG.pack(_NLMSG.size + len(payload), msg_type, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
              + payload)  # fmt: skip
    out: list[tuple[int, bytes]] = []
    while True:
        data = sock.recv(1 << 17)
        if not data:
            return out
        off = 0
        while off + _NLMSG.size <= len(data):
            ln, typ, _fl, _seq, _pid = _NLMSG.unpack_from(data, off)
            if ln < _NLMSG.size or off + ln > len(data):
                return out
            if typ == NLMSG_DONE:
                return out
            body = data[off + _NLMSG.size : off + ln]
            if typ == NLMSG_ERROR:
                code = struct.unpack_from("=i", body)[0] if len(body) >= 4 else -errno.EIO
                if code:
                    raise OSError(-code, f"netlink: {errno.errorcode.get(-code, code)}")
                return out
            out.append((typ, body))
            off += (ln + 3) & ~3


def attrs(data: bytes, off: int = 0) -> dict[int, bytes]:
    """Netlink attributes from ``data[off:]``: type (flags masked) -> payload."""
    out: dict[int, bytes] = {}
    n = len(data)
    while off + _RTA.size <= n:
        ln, typ = _RTA.unpack_from(data, off)
        if ln < _RTA.size or off + ln > n:
            break
        out[typ & 0x3FFF] = data[off + _RTA.size : off + ln]
        off += (ln + 3) & ~3
    return out


def _cstr(b: bytes | None) -> str | None:
    return None if b is None else b.split(b"\0", 1)[0].decode(errors="replace")


def links(sock: socket.socket) -> tuple[dict[str, dict[str, Any]], dict[int, str]]:
    """ifname -> ``{"ifname", "ifindex", "flags": [...], "operstate"}`` (as ``ip -j link``), and
    ifindex -> ifname."""
    out: dict[str, dict[str, Any]] = {}
    names: dict[int, str] = {}
    for typ, body in dump(sock, RTM_GETLINK, _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        if typ != RTM_NEWLINK or len(body) < _IFINFO.size:
            continue
        _fam, _type, index, flags, _change = _IFINFO.unpack_from(body)
        a = attrs(body, _IFINFO.size)
        name = _cstr(a.get(IFLA_IFNAME))
        if name is None:
            continue
        op = a.get(IFLA_OPERSTATE)
        state = _OPERSTATES[op[0]] if op and op[0] < len(_OPERSTATES) else "UNKNOWN"
        out[name] = {"ifname": name, "ifindex": index, "operstate": state,
                     "flags": [n for bit, n in _FLAGS if flags & bit]}  # fmt: skip
        names[index] = name
    return out, names


def root_qdiscs(sock: socket.socket, names: dict[int, str]) -> dict[str, dict[str, Any]]:
    """ifname -> its root qdisc ``{"kind", "root": True, "options": {"rate": bytes/s}}`` (the
    rate for tbf only, as ``tc -j`` reports it)."""
    out: dict[str, dict[str, Any]] = {}
    for typ, body in dump(sock, RTM_GETQDISC, _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        if typ != RTM_NEWQDISC or len(body) < _TCMSG.size:
            continue
        _fam, index, _handle, parent, _info = _TCMSG.unpack_from(body)
        if parent != TC_H_ROOT or index not in names:
            continue
        a = attrs(body, _TCMSG.size)
        kind = _cstr(a.get(TCA_KIND))
        q: dict[str, Any] = {"kind": kind, "root": True, "dev": names[index], "options": {}}
        if kind == "tbf" and TCA_OPTIONS in a:
            o = attrs(a[TCA_OPTIONS])
            rate = None
            if TCA_TBF_RATE64 in o and len(o[TCA_TBF_RATE64]) >= 8:
                rate = struct.unpack_from("=Q", o[TCA_TBF_RATE64])[0]
            elif TCA_TBF_PARMS in o and len(o[TCA_TBF_PARMS]) >= 12:
                rate = struct.unpack_from("=I", o[TCA_TBF_PARMS], 8)[0]  # tc_ratespec.rate
            q["options"]["rate"] = rate
        out[names[index]] = q
    return out


def nft_tables(sock: socket.socket) -> list[str]:
    """Names of the namespace's nftables tables, every family (none without nf_tables)."""
    msg = NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE
    try:
        replies = dump(sock, msg, _NFGEN.pack(socket.AF_UNSPEC, 0, 0))
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.EPROTONOSUPPORT):
            return []
        raise
    out = []
    for typ, body in replies:
        if typ == NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE and len(body) >= _NFGEN.size:
            name = _cstr(attrs(body, _NFGEN.size).get(NFTA_TABLE_NAME))
            if name is not None:
                out.append(name)
    return out


def read_namespace(ns: str) -> NsView:
    """The namespace's links, root qdiscs and nft tables (``NsView(False)`` if it is gone)."""
    try:
        with in_netns(ns):
            rt = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                               NETLINK_ROUTE)  # fmt: skip
            try:
                nf = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                   NETLINK_NETFILTER)  # fmt: skip
            except OSError:
                nf = None
    except Exception:  # the namespace is gone (lab going down)
        return NsView(exists=False)
    try:
        for s in (rt, nf):
            if s is not None:
                s.settimeout(2.0)
        lk, names = links(rt)
        view = NsView(exists=True, links=lk, qdiscs=root_qdiscs(rt, names))
        if nf is not None:
            view.nft_tables = nft_tables(nf)
        return view
    finally:
        rt.close()
        if nf is not None:
            nf.close()


def read_lab(state: Any, namespaces: list[str] | None = None) -> dict[str, NsView]:
    """:func:`read_namespace` of every namespace of the lab (or of ``namespaces``)."""
    return {ns: read_namespace(ns) for ns in (namespaces or list(state.namespaces))}
