"""mrc-switch refuses a bad config at start, naming the field (no sockets needed)."""

from __future__ import annotations

import json
import subprocess
import sys

from test_switch_config import GOOD


def run(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mrcswitch.main", "--config", str(path),
                           "--check"], capture_output=True, text=True)  # fmt: skip


def test_check_accepts_good_config(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(GOOD))
    r = run(p)
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_bad_config_is_refused_naming_the_field(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["ports"][0]["rate_mbit"] = -5
    p = tmp_path / "s.json"
    p.write_text(json.dumps(bad))
    r = run(p)
    assert r.returncode == 2
    assert "ports[0].rate_mbit" in r.stderr


def test_old_module_path_still_runs(tmp_path):
    """``python -m mrcswitch.switch`` (scripts outside the tree) runs mrcswitch.main."""
    p = tmp_path / "s.json"
    p.write_text(json.dumps(GOOD))
    r = subprocess.run([sys.executable, "-m", "mrcswitch.switch", "--config", str(p), "--check"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_request_needs_control_and_json(tmp_path):
    def req(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mrcswitch.main", *args],
                              capture_output=True, text=True)  # fmt: skip

    r = req("--request", '{"op": "list"}')
    assert r.returncode == 2 and "--control" in r.stderr
    r = req("--control", str(tmp_path / "c.sock"), "--request", "{not json")
    assert r.returncode == 2 and "not JSON" in r.stderr
    r = req("--control", str(tmp_path / "c.sock"), "--request", '{"op": "list"}')
    assert r.returncode == 1 and "control socket" in r.stderr  # nothing listens there
    r = req()
    assert r.returncode == 2 and "--config is required" in r.stderr
