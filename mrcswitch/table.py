"""The static uSID table: written at boot from the config, never changed while running.

Lookups are keyed by the leading ``block + uSID`` bytes of a destination address (6 bytes
with the default /32 block), so the pipeline looks an address up with one slice and one
dict probe, without converting it to an integer first.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from .config import USID_BITS, SwitchConfig


@dataclass(frozen=True, slots=True)
class StaticTable:
    block: bytes  # lblen/8 bytes
    lblen: int
    own_usids: frozenset[int]
    routes: MappingProxyType  # key bytes (block + uSID) -> port index
    own_keys: frozenset[bytes]  # block + own uSID, for each own uSID
    port_names: tuple[str, ...]

    @property
    def key_len(self) -> int:
        """Bytes of an address that form the /(lblen+16) lookup key."""
        return (self.lblen + USID_BITS) // 8

    def key(self, usid: int) -> bytes:
        return self.block + usid.to_bytes(USID_BITS // 8, "big")

    def lookup(self, usid: int) -> int | None:
        """The port index a uSID routes to, or None."""
        return self.routes.get(self.key(usid))

    def lookup_address(self, addr: bytes) -> int | None:
        """The port index for a 16-byte address's leading /(lblen+16), or None."""
        return self.routes.get(bytes(addr[: self.key_len]))

    def is_own(self, addr: bytes) -> bool:
        return bytes(addr[: self.key_len]) in self.own_keys

    def __len__(self) -> int:
        return len(self.routes)

    def entries(self) -> list[tuple[int, str]]:
        """(uSID, port name) pairs, sorted by uSID: for humans and the stats file."""
        n = len(self.block)
        return sorted(
            (int.from_bytes(k[n:], "big"), self.port_names[p]) for k, p in self.routes.items()
        )


def build_table(cfg: SwitchConfig) -> StaticTable:
    names = tuple(p.name for p in cfg.ports)
    routes = {
        cfg.block + usid.to_bytes(2, "big"): cfg.port_index(port)
        for usid, port in cfg.table.items()
    }
    return StaticTable(
        block=cfg.block,
        lblen=cfg.lblen,
        own_usids=frozenset(cfg.own_usids),
        routes=MappingProxyType(routes),
        own_keys=frozenset(cfg.block + u.to_bytes(2, "big") for u in cfg.own_usids),
        port_names=names,
    )
