"""What every wire codec shares: WireError and the checks that raise it, the bytes-like type,
and fast builders for frozen dataclasses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mrcnic.errors import MrcError

BytesLike = bytes | bytearray | memoryview
_T = TypeVar("_T")


def fast_constructor(cls: type[_T]) -> Callable[..., _T]:
    """A class whose constructor returns a genuine, frozen `cls` instance about 5x faster than
    cls() for the decoders (hot paths): a frozen dataclass's __init__ pays object.__setattr__
    per field, while this twin has the same slots, assigns them plainly and then becomes cls
    (same slot layout, so the __class__ assignment is legal). Takes every field positionally.
    Also used by other modules' hot-path dataclasses (e.g. cc.AckSample)."""
    names: tuple[str, ...] = cls.__slots__  # type: ignore[attr-defined]  # slotted dataclasses only
    body = "".join(f"    self.{n} = {n}\n" for n in names)
    src = f"def __init__(self, {', '.join(names)}):\n{body}    self.__class__ = cls\n"
    ns: dict[str, Any] = {"cls": cls}
    exec(src, ns)  # fixed template over our own field names, like dataclasses
    return type(f"_{cls.__name__}Builder", (), {"__slots__": names, "__init__": ns["__init__"]})


class WireError(MrcError, ValueError):
    """Truncated or malformed input (decode), or a value that does not fit its field (encode).

    .header: which header ("BTH", "SACK", "ICRC", ...); .reason: what was wrong;
    .offset: byte offset (into the buffer given) of the header or field, or None.
    """

    def __init__(self, header: str, reason: str, offset: int | None = None) -> None:
        super().__init__(header, reason, offset)
        self.header = header
        self.reason = reason
        self.offset = offset

    def __str__(self) -> str:
        if self.offset is None or "offset" in self.reason:
            return f"{self.header}: {self.reason}"
        return f"{self.header}: {self.reason} (offset {self.offset})"


def _truncated(header: str, need: int, offset: int, have: int) -> WireError:
    return WireError(
        header, f"truncated: need {need} bytes at offset {offset}, have {max(have, 0)}", offset
    )


def _range_error(header: str, name: str, value: object, bits: int) -> WireError:
    return WireError(header, f"{name} out of range: {value!r} (must fit in {bits} unsigned bits)")


def _check_uint(header: str, name: str, value: int, bits: int) -> None:
    if not (isinstance(value, int) and 0 <= value < (1 << bits)):
        raise _range_error(header, name, value, bits)


def _check_bytes(header: str, name: str, value: object, size: int) -> None:
    if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) != size:
        raise WireError(header, f"{name} must be {size} bytes, got {value!r}")


def _explain(header: str, h: object, spec: tuple[tuple[str, int], ...]) -> None:
    """Slow path of an encoder whose fast path failed: raise WireError naming the field."""
    for name, bits in spec:
        _check_uint(header, name, getattr(h, name), bits)
    raise WireError(header, f"cannot encode {h!r}")


def _known(value: object, table: dict) -> bool:
    """value is one of an enum's defined values (False for anything unhashable)."""
    try:
        return value in table
    except TypeError:
        return False


def _start(header: str, buf: BytesLike, offset: int, size: int) -> None:
    """Check that buf holds size bytes at offset (the common prologue of every decoder)."""
    if offset < 0:
        raise WireError(header, f"negative offset {offset}", offset)
    have = len(buf) - offset
    if have < size:
        raise _truncated(header, size, offset, have)
