"""docs/api.md's example is executed here, so the documentation cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_api_doc_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/api.md lost its example"
    namespace: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)  # our own document
    out = capsys.readouterr().out
    assert "packets" in out and "GOOD" in out
    assert namespace["target"] == bytearray(namespace["data"])
