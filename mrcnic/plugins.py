"""User plugins and the per-QP choices every command passes down.

A plugin is a Python file (``--plugin my_policy.py``) or module (``--plugin pkg.mod``, or
``pkg.mod:setup`` to also call ``setup()``) whose top level registers more path policies
(:func:`mrcnic.transport.path_policy.register_path_policy`) or congestion controls
(:func:`mrcnic.transport.cc.register_cc`). ``--path-policy``, ``--plane-share`` and ``--cc``
then choose by name. The choices travel to the NIC processes a lab command starts through
the environment (``MRC_PLUGINS``, ``MRC_PATH_POLICY``, ``MRC_PLANE_SHARE``, ``MRC_CC``), the way
``MRC_NIC_ENGINE`` does, so every QP of a run is made the same way wherever it lives.
docs/extending.md has a worked example of each kind.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mrcnic.transport.path_policy import PLANE_SHARES, check_path_policy

if TYPE_CHECKING:
    from mrcnic.transport.qp_types import QpConfig

ENV_PLUGINS = "MRC_PLUGINS"  # os.pathsep-separated plugin specs
ENV_PATH_POLICY = "MRC_PATH_POLICY"
ENV_PLANE_SHARE = "MRC_PLANE_SHARE"
ENV_CC = "MRC_CC"

_loaded: set[str] = set()


class PluginError(ValueError):
    """A plugin that cannot be found or fails while loading, or a name nothing registered."""


def load_plugin(spec: str) -> None:
    """Load one plugin (a ``.py`` file, ``module`` or ``module:function``); each once."""
    spec = spec.strip()
    if not spec or spec in _loaded:
        return
    try:
        if spec.endswith(".py") or os.sep in spec:
            path = Path(spec).expanduser().resolve()
            if not path.is_file():
                raise PluginError(f"plugin file {spec!r} does not exist")
            name = f"mrc_plugin_{path.stem}_{len(_loaded)}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            if mod_spec is None or mod_spec.loader is None:
                raise PluginError(f"plugin {spec!r} is not a Python file")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            mod_name, _, func = spec.partition(":")
            module = importlib.import_module(mod_name)
            if func:
                fn = getattr(module, func, None)
                if not callable(fn):
                    raise PluginError(f"plugin {spec!r}: {mod_name} has no function {func!r}")
                fn()
    except PluginError:
        raise
    except Exception as e:  # a user's file: say which one failed, and how
        raise PluginError(f"plugin {spec!r} failed to load: {type(e).__name__}: {e}") from e
    _loaded.add(spec)


def load_plugins(specs: list[str] | tuple[str, ...]) -> None:
    for spec in specs:
        load_plugin(spec)


@dataclass(frozen=True, slots=True)
class QpChoice:
    """How the QPs of a run are made: None keeps the QP config's own setting."""

    path_policy: str | None = None
    plane_share: str | None = None
    cc: str | None = None
    plugins: tuple[str, ...] = ()

    def check(self) -> None:
        """Load the plugins, then refuse names nothing registered (a clear error, before any
        QP exists)."""
        # here, not at the top: the CC registry costs mrc-lab's command line 0.18 s to import
        # (python -X importtime, 2026-11-27), and most of its commands make no QP
        from mrcnic.transport import cc as cc_registry

        load_plugins(self.plugins)
        if self.path_policy is not None:
            try:
                check_path_policy(self.path_policy)
            except ValueError as e:
                raise PluginError(str(e)) from None
        if self.plane_share is not None and self.plane_share not in PLANE_SHARES:
            raise PluginError(
                f"--plane-share is one of {', '.join(PLANE_SHARES)}, not {self.plane_share!r}"
            )
        if self.cc is not None and self.cc not in cc_registry.available():
            raise PluginError(
                f"no congestion control named {self.cc!r}; known: "
                f"{', '.join(cc_registry.available())} (load more with --plugin FILE.py)"
            )

    def apply(self, cfg: QpConfig) -> QpConfig:
        """``cfg`` with these choices (an MRC QP's config)."""
        ev = cfg.ev
        if self.path_policy is not None:
            ev = replace(ev, path_policy=self.path_policy)
        if self.plane_share is not None:
            ev = replace(ev, plane_share=self.plane_share)
        return replace(cfg, ev=ev, cc=self.cc if self.cc is not None else cfg.cc)

    def export(self) -> None:
        """Into this process's environment, for the processes it starts."""
        for key, value in (
            (ENV_PATH_POLICY, self.path_policy),
            (ENV_PLANE_SHARE, self.plane_share),
            (ENV_CC, self.cc),
        ):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self.plugins:
            paths = [str(Path(p).resolve()) if p.endswith(".py") else p for p in self.plugins]
            os.environ[ENV_PLUGINS] = os.pathsep.join(paths)
        else:
            os.environ.pop(ENV_PLUGINS, None)

    def as_dict(self) -> dict[str, str | None]:
        return {"path_policy": self.path_policy, "plane_share": self.plane_share, "cc": self.cc}


def choice_from_env() -> QpChoice:
    """The choices a parent command exported (:meth:`QpChoice.export`), plugins loaded."""
    env = os.environ
    plugins = tuple(p for p in env.get(ENV_PLUGINS, "").split(os.pathsep) if p)
    choice = QpChoice(
        env.get(ENV_PATH_POLICY) or None,
        env.get(ENV_PLANE_SHARE) or None,
        env.get(ENV_CC) or None,
        plugins,
    )
    choice.check()
    return choice


def add_arguments(p: argparse.ArgumentParser, cc: bool = True) -> None:
    """``--path-policy``, ``--plane-share``, ``--plugin`` (and ``--cc``): the same flags on
    every command that makes QPs."""
    p.add_argument(
        "--path-policy",
        default=None,
        metavar="NAME",
        help="which EVs are sprayed: mrc (the EV state machine, path-aware; default), "
        "oblivious, reps, ecmp (per-flow hashing), or one a --plugin registers",
    )
    p.add_argument(
        "--plane-share",
        default=None,
        choices=PLANE_SHARES,
        help="equal: every plane carries the same share (MRC's rule, default); capacity: "
        "shares follow each plane's surviving paths",
    )
    if cc:
        p.add_argument(
            "--cc",
            default=None,
            metavar="NAME",
            help="congestion control of MRC QPs: nscc (default), fixed, ..., or one a "
            "--plugin registers",
        )
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE.py|MODULE[:FUNC]",
        help="load a file or module that registers path policies or congestion controls "
        "(repeatable; docs/extending.md)",
    )


def choice_from_args(a: argparse.Namespace) -> QpChoice:
    """The flags of :func:`add_arguments`, over what a parent command exported (a command
    started by another, e.g. mrc-bench by an experiment, keeps its parent's choices unless its
    own flags say otherwise)."""
    env = choice_from_env()
    flags = tuple(getattr(a, "plugin", ()) or ())
    choice = QpChoice(
        getattr(a, "path_policy", None) or env.path_policy,
        getattr(a, "plane_share", None) or env.plane_share,
        getattr(a, "cc", None) or env.cc,
        env.plugins + tuple(p for p in flags if p not in env.plugins),
    )
    choice.check()
    return choice
