"""Settings shared by both test tiers.

Hypothesis runs *derandomized* (the same examples on every run) with no per-example deadline,
so the README's test command passes or fails the same way on every machine of our kind,
loaded or not. To hunt for new counterexamples instead, run with
``MRC_HYPOTHESIS=explore`` (random examples, as hypothesis defaults to): a failure it finds
is a bug to fix and then a fixed ``@example`` in its test.

This file also puts tests/ on ``sys.path`` (pytest's default import mode adds a conftest's
directory), so every tier imports the shared helpers by bare name: ``waiting`` (waiting for
something to happen instead of sleeping) and ``commands`` (the command lines as subprocesses
or in-process ``main`` calls).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("suite", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("MRC_HYPOTHESIS", "suite"))
