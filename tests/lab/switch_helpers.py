"""The switch lab tests' helpers: the three-namespace switch chain of
``lab.workloads.bench.switch_chain`` (which bench/bench_switch.py uses too), under the name the tests
import (``import switch_helpers as H``).  Entering a namespace is ``mrcnic.io.netns.in_netns``."""

from __future__ import annotations

from lab.workloads.bench.switch_chain import *  # noqa: F403
from lab.workloads.bench.switch_chain import _start_switch  # noqa: F401  (a test restarts a switch)
from mrcnic.io.netns import in_netns  # noqa: F401
