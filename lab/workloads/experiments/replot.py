"""Draw an experiment's PNG again from its JSON, with today's plotting code (the runs are not
repeated): ``python -m lab.workloads.experiments.replot [DIR]`` (default results/experiments)
for the experiments whose picture is a function of their result."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.fabric.paths import REPO
from lab.workloads.experiments import flaps, p2p, t1_reboot, trim

DRAW: dict[str, Callable[[dict[str, Any], Path], Any]] = {
    "flaps": flaps.draw,
    "t1_reboot": t1_reboot.draw,
    "trim": trim.draw_result,
    "p2p": lambda d, path: p2p.draw(path, d["mrc"], d["rocev2"]),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else REPO / "results" / "experiments"
    done = 0
    for name, draw in DRAW.items():
        path = out / f"{name}.json"
        if not path.exists():
            continue
        draw(json.loads(path.read_text()), out / f"{name}.png")
        print(f"drew {out / f'{name}.png'} from {path}")
        done += 1
    if not done:
        print(f"replot: no result JSON of {', '.join(DRAW)} in {out}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
