"""The optional packages (mrcnic/optional.py): each in one extra of pyproject.toml, and a
missing one is a one-line error naming the extra, in a subprocess where it cannot be
imported, for the commands that need it; the commands that do not still run."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mrcnic.optional import EXTRAS, MissingExtra, need, stand_in

ROOT = Path(__file__).resolve().parents[2]


def test_every_optional_package_is_in_its_extra_and_not_a_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = " ".join(project["dependencies"])
    extras = project["optional-dependencies"]
    for package, extra in EXTRAS.items():
        assert package not in deps, package
        assert any(r.startswith(package) for r in extras[extra]), (package, extra)
        assert extra in extras["all"][0], extra


def test_need_names_the_extra() -> None:
    with pytest.raises(MissingExtra, match=r"a plot needs matplotlib, in mrc's 'plot' extra"):
        need("matplotlib.nosuchmodule_x", "a plot")  # (a missing submodule of a package)
    with pytest.raises(MissingExtra, match=r"\.\[collectives\]"):
        _ = stand_in("numpy", "the data").zeros


#: no import of these packages can succeed in the child
BLOCK = "import sys\nfor m in ('numpy', 'matplotlib', 'rich', 'scapy'): sys.modules[m] = None\n"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_without_extras_the_core_runs_and_the_rest_says_which_extra() -> None:
    # mrc-sim's permutation needs none of them
    p = _run("from mrcnic.sim.transfer import main\n"
             "sys.exit(main(['--workload', 'permutation', '--planes', '2', '--t0', '2', "
             "'--t1', '2', '--size', '256K', '--json']))")  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    # its collectives need numpy: one line, no traceback
    p = _run("from mrcnic.sim.transfer import main\n"
             "sys.exit(main(['--workload', 'allreduce', '--planes', '2', '--t0', '2', "
             "'--t1', '2', '--size', '256K']))")  # fmt: skip
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "needs numpy, in mrc's 'collectives' extra" in p.stderr
    # the scapy layers, and every import of the CLIs
    p = _run("import lab.cli, lab.bench_cli, lab.soak, mrcswitch.main, lab.workloads.demo\n"
             "import mrcnic.wire.scapy_layers")  # fmt: skip
    assert "MissingExtra" in p.stderr and "'capture' extra" in p.stderr, p.stderr[-2000:]
