"""CC profiles: which congestion control a QP runs, with what options."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import fields, replace

from mrcnic.profiles.lifecycle import Lifecycle, ProfileOp, ProfileState, ProfileStateError
from mrcnic.transport import cc as _cc
from mrcnic.transport.qp_types import QpConfig


def cc_option_names(algorithm: str) -> tuple[str, ...] | None:
    """The options ``algorithm`` accepts, or None when its factory takes any keyword (it then
    checks them itself when a QP creates it).  Raises ValueError for an unknown name."""
    factory = _cc.factory(algorithm)
    if isinstance(factory, type) and issubclass(factory, _cc.UetNscc):
        return tuple(f.name for f in fields(_cc.NsccParams))
    params = list(inspect.signature(factory).parameters.values())[1:]  # after CcParams
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


_NSCC_FLAGS = frozenset(
    f.name for f in fields(_cc.NsccParams) if isinstance(f.default, bool)
)  # the NsccParams fields that are switches; the others are numbers


def _check_cc_options(algorithm: str, options: Mapping[str, object]) -> None:
    names = cc_option_names(algorithm)
    if names is not None:
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(
                f"{algorithm}: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(names) or '(none)'}"
            )
    factory = _cc.factory(algorithm)
    if isinstance(factory, type) and issubclass(factory, _cc.UetNscc):
        for k, v in options.items():
            if v is None:
                continue  # "derive from the QP"
            if k in _NSCC_FLAGS:
                if not isinstance(v, bool):
                    raise ValueError(f"{algorithm}: {k} must be True or False, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{algorithm}: {k} must be a finite number, got {v!r}")


class CcProfile(Lifecycle):
    """A congestion control algorithm by registered name (``mrcnic.transport.cc``) and its
    options, checked against what the algorithm accepts.  Values that depend on the QP
    (e.g. a window against the derived BDP) are checked when a QP is created from it."""

    kind = "CC profile"

    def __init__(self, profile_id: int = 0) -> None:
        super().__init__(profile_id)
        self._clear()

    def _clear(self) -> None:
        self.algorithm: str | None = None
        self.options: dict[str, object] = {}

    def configure(self, algorithm: str, options: Mapping[str, object] | None = None) -> None:
        """INIT/OFFLINE -> OFFLINE with ``algorithm`` (e.g. ``"uet-1.0-nscc"``)."""
        self._check(ProfileOp.CONFIGURE)
        opts = dict(options or {})
        _check_cc_options(algorithm, opts)
        self._step(ProfileOp.CONFIGURE)
        self.algorithm, self.options = algorithm, opts

    def set_options(self, **options: object) -> None:
        """Change some options (OFFLINE only); ``name=None`` goes back to the default."""
        self._check(ProfileOp.EDIT)
        assert self.algorithm is not None  # OFFLINE: configured
        merged = {**self.options, **options}
        merged = {k: v for k, v in merged.items() if v is not None}
        _check_cc_options(self.algorithm, merged)
        self._step(ProfileOp.EDIT)
        self.options = merged

    def apply(self, config: QpConfig) -> QpConfig:
        """``config`` with this algorithm and options (ONLINE only)."""
        if self.state is not ProfileState.ONLINE:
            raise ProfileStateError(
                f"{self.kind} {self.profile_id} is {self.state.name}: only ONLINE profiles are used"
            )
        assert self.algorithm is not None
        return replace(config, cc=self.algorithm, cc_options=tuple(sorted(self.options.items())))
