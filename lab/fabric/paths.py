"""Where the checkout is: processes the lab starts run from it, and results go under it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # lab/fabric/paths.py -> the checkout
RESULTS = REPO / "results"
