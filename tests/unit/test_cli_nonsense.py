"""Every tool fed nonsense: each flag given generated bad values must end in a clear error
(argparse's usage error, or the tool's own message and exit status), never a traceback,
and before any work is done (mrc-sim's values are checked before the run; mrc-bench's before
the lab is looked for; mrc-lab's before anything is built; mrc-switch --check before a
port is opened).

The values come from a fixed list of kinds (zero, negative, not a number, huge, empty,
units that do not belong) and a seeded random mix of them; each case runs the tool's
``main`` in this process, so a hang shows as the suite's timeout and an exception as a
failure naming the argv.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import random
from pathlib import Path

import pytest

from lab import bench_cli
from lab import cli as lab_cli
from mrcnic.sim import transfer
from mrcswitch import main as switch_main

NONSENSE = ["0", "-1", "-0.5", "nan", "inf", "1e309", "abc", "", "99999999999999", "1%", "100%",
            "64G", "0x10", "1..2", "5 Mbit", "-1s", "1kg"]  # fmt: skip


def _call(fn, argv: list[str]) -> tuple[int, str]:
    """Run a tool's main; -> (exit status, stderr + stdout). Any exception but SystemExit
    is the failure this test looks for."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = fn(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
    return code, err.getvalue() + out.getvalue()


# --- mrc-sim: values checked before the run ------------------------------------------------

SIM_FLAGS = ["--planes", "--paths-per-plane", "--size", "--msg-size", "--mtu", "--port-rate",
             "--path-rate", "--delay", "--queue", "--ecn", "--loss", "--evs", "--max-time",
             "--timeline", "--qps", "--t0", "--hosts-per-t0", "--fail", "--heal", "--path-loss",
             "--rocev2-timeout"]  # fmt: skip


def _sim_check(argv: list[str]) -> tuple[int, str]:
    """mrc-sim's parsing and checks only (what runs before the simulation)."""

    def fn(args: list[str]) -> int:
        parser = transfer.build_parser()
        a = parser.parse_args(args)
        try:
            transfer.config_from_args(a)
        except ValueError as e:
            parser.error(str(e))
        return 0

    return _call(fn, argv)


@pytest.mark.parametrize("flag", SIM_FLAGS)
def test_mrc_sim_refuses_nonsense_clearly(flag: str) -> None:
    refused = 0
    for value in NONSENSE:
        code, text = _sim_check([flag, value])
        assert "Traceback" not in text, (flag, value, text)
        if code:
            assert code == 2 and "error:" in text, (flag, value, code, text)
            refused += 1
    assert refused >= len(NONSENSE) - 3, f"{flag}: only {refused} of {len(NONSENSE)} refused"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--loss", "1"], "for 1% write"),
        (["--loss", "50"], "a probability below 1, or a percent below 100%"),
        (["--port-rate", "0"], "above 0"),
        (["--size", "64G"], "more than this machine has free"),
        (["--queue", "0"], "one full data frame"),
        (["--queue", "100"], "one full data frame"),
        (["--evs", "0"], "multiple of 8"),
        (["--evs", "3"], "multiple of 8"),
        (["--queue", "64K", "--ecn", "64K"], "nothing would ever be marked"),
        (["--timeline", "0"], "bin width above 0"),
        (["--max-time", "0"], "above 0"),
        (["--heal", "3@1s"], "was not failed before"),
        (["--fail", "3@2s", "--heal", "3@1s"], "was not failed before"),
        (["--size", "1M", "--msg-size", "2M"], "one write is at most the whole transfer"),
        (["--rocev2-ports", "hash"], "--transport rocev2 only"),
        (["--rocev2-ports", "rail"], "--transport rocev2 only"),  # the default, but given
        (["--rocev2-timeout", "auto"], "--transport rocev2 only"),
        (["--transport", "rocev2", "--rocev2-option", "nak_retries=maybe"], "is true or false"),
        (["--transport", "rocev2", "--rocev2-option", "retry_cnt=1.5"], "is an integer"),
        (["--timeline", "1ns"], "a bin of at least 1e-06s"),
        (["--timeline", "2us", "--size", "1G"], "more than 1,000,000 bins"),
        (["--rate", "100k"], "more than --max-time"),
        (["--max-time", "1ms"], "more than --max-time"),
        (["--delay", "1000s"], "at most 0.1s"),
        (["--qps", "100000"], "at most 1024"),
        (["--duration", "1s"], "--workload incast only"),
        (["--senders", "3"], "--workload incast only"),
        (["--workload", "incast", "--duration", "0"], "a time above 0"),
    ],
)
def test_mrc_sim_names_the_problem(argv: list[str], words: str) -> None:
    code, text = _sim_check(argv)
    assert code == 2 and words in text, text


def test_mrc_sim_still_takes_good_values() -> None:
    for argv in (["--loss", "0.01"], ["--loss", "1%"], ["--size", "256K"],
                 ["--fail", "3@1ms", "--heal", "3@2ms"], ["--evs", "64"],
                 ["--transport", "rocev2", "--rocev2-ports", "hash"]):  # fmt: skip
        assert _sim_check(argv) == (0, ""), argv


def test_mrc_sim_says_why_a_run_did_not_complete() -> None:
    code, text = _call(transfer.main, ["--size", "256K", "--loss", "0.9", "--max-time", "20ms",
                                       "--planes", "2", "--t1", "2"])  # fmt: skip
    assert code == 1 and "did not complete: --max-time 0.02s of virtual time ran out" in text, text


def test_mrc_sim_nonsense_mixes() -> None:
    rng = random.Random(29)
    for _ in range(150):
        argv = []
        for flag in rng.sample(SIM_FLAGS, rng.randint(1, 4)):
            argv += [flag, rng.choice(NONSENSE)]
        code, text = _sim_check(argv)
        assert "Traceback" not in text and code in (0, 2), (argv, text)


# --- mrc-bench: values checked before the lab is looked for ----------------------------------

BENCH_CASES = [
    ["write", "--size", "0"], ["write", "--qps", "0"], ["write", "--qps", "999"],
    ["write", "--src", "h1", "--dst", "h1"], ["write", "--duration", "0"],
    ["write", "--iters", "0"], ["write", "--depth", "0"], ["write", "--timeline-ms", "-1"],
    ["write", "--plot", "/no/such/dir/x.png"], ["lat", "--size", "0"],
    ["incast", "--senders", "h1,h2", "--dst", "h0", "--qps", "0"],
    ["incast", "--senders", "h1", "--dst", "h0", "--duration", "0"],
    ["write", "--timeline", "1ns"], ["write", "--region", "0"],
    ["write", "--port", "-1"],
    ["write", "--port", "70000"], ["write", "--ev-log", "-1"], ["write", "--depth", "100000"],
    ["write", "--progress", "0"], ["lat", "--warmup", "-1"], ["write", "--timeout", "0"],
    ["allreduce", "--timeout", "0"], ["write", "--plot", "x.txt"],
    ["allreduce", "--hosts", "foo"], ["incast", "--senders", "h1;h2", "--dst", "h0"],
    ["allreduce", "--rank", "-1"],
]  # fmt: skip


@pytest.mark.parametrize("argv", BENCH_CASES)
def test_mrc_bench_checks_values_before_the_lab(argv: list[str]) -> None:
    code, text = _call(bench_cli.main, [*argv, "--lab", "mrcnolab"])
    assert code == bench_cli.EXIT_USAGE and "Traceback" not in text, text
    assert "no lab named" not in text, f"{argv}: the lab was looked for first: {text}"


def test_mrc_bench_nonsense_values() -> None:
    for flag in ("--size", "--qps", "--iters", "--depth", "--duration", "--timeline-ms"):
        for value in NONSENSE:
            code, text = _call(bench_cli.main, ["write", flag, value, "--lab", "mrcnolab"])
            assert code == bench_cli.EXIT_USAGE and "Traceback" not in text, (flag, value, text)


# --- mrc-lab: before anything is built (plan and export need no root) ------------------------

LAB_TOPOLOGY_FLAGS = ["--planes", "--t0", "--t1", "--hosts-per-t0", "--rate-mbit", "--buffer-kb",
                      "--ecn-kb", "--mtu", "--block", "--delay", "--machines", "--vxlan-port",
                      "--underlay"]  # fmt: skip


@pytest.mark.parametrize("flag", LAB_TOPOLOGY_FLAGS)
def test_mrc_lab_plan_refuses_nonsense_clearly(flag: str) -> None:
    for value in NONSENSE:
        code, text = _call(lab_cli.main, ["plan", "--summary", flag, value])
        assert "Traceback" not in text, (flag, value, text)
        assert code in (0, 1, 2), (flag, value, code)
        if code:
            assert "mrc-lab" in text and ("error" in text or ":" in text), text


def test_mrc_lab_up_refuses_a_plan_too_large_before_building() -> None:
    code, text = _call(lab_cli.main, ["up", "--name", "mrcbig", "--planes", "8", "--t0", "512",
                                      "--t1", "256", "--hosts-per-t0", "256", "-q"])  # fmt: skip
    assert code in (1, 2) and ("at most 2,048" in text or "root" in text), text


LAB_CASES = [
    (["flap", "a", "b", "--period", "0"], "above 0"),
    (["reboot", "p0-t1-0", "--down", "1e9"], "at most 600000"),
    (["loss", "a", "b", "--percent", "500"], "at most 1"),
    (["loss", "a", "b", "--loss", "1"], "for 1% write 1%"),
    (["probe", "--lossy", "1"], "for 1% write 1%"),
    (["capture", "h0", "-w", ""], "a file name"),
    (["capture", "h0", "-w", "/tmp"], "a file name"),
    (["capture", "h0", "-w", "/proc/version"], "cannot be written"),
    (["experiment", "p2p", "--reps", "0"], "at least 1"),
    (["experiment", "p2p", "--cpu-bound-repeats", "-1"], "at least 0"),
    (["experiment", "p2p", "--out", "/no/such/dir/sub"], "does not exist"),
    (["experiment", "nosuch"], "nosuch"),
]


@pytest.mark.parametrize(("argv", "words"), LAB_CASES)
def test_mrc_lab_checks_values_before_the_lab(argv: list[str], words: str) -> None:
    code, text = _call(lab_cli.main, [*argv, "--lab", "mrcnolab"])
    assert code == 2 and words in text and "Traceback" not in text, text
    assert "no lab named" not in text, f"{argv}: the lab was looked for first: {text}"


def test_make_demo_checks_values_before_the_lab(tmp_path: Path) -> None:
    from lab.workloads import demo

    for argv, words in (
        (["--duration", "0"], "above 0"), (["--planes", "0"], "1..16"),
        (["--lab", "X"], "lab name"), (["--size", "0"], "1 byte"),
        (["--src", "h0", "--dst", "h0"], "different hosts"), (["--timeline", "0"], "above 0"),
        (["--png", str(tmp_path / "no" / "x.png")], "does not exist"),
        (["--out", str(tmp_path / "no" / "x.json")], "does not exist"),
        (["--png", "x.jpg"], "ending in .png"), (["--dst", "h99"], "hosts h0 .."),
    ):  # fmt: skip
        code, text = _call(demo.main, argv)
        assert code == 2 and words in text and "Traceback" not in text, (argv, text)
        assert "bringing the lab up" not in text and "calibrating" not in text, (argv, text)


def test_the_soak_checks_values_before_the_lab() -> None:
    soak = importlib.import_module("lab.workloads.soak.main")

    for argv in (["--minutes", "nan"], ["--minutes", "0"], ["--events-per-min", "0"],
                 ["--step-timeout", "0"], ["--progress", "-1s"]):  # fmt: skip
        code, text = _call(soak.main, argv)
        assert code == 2 and "Traceback" not in text, (argv, text)


def test_mrc_lab_exec_keeps_its_own_flags() -> None:
    code, text = _call(lab_cli.main, ["exec", "h0", "--lab", "mrcnolab", "--", "true"])
    assert code == 2 and "no lab named 'mrcnolab'" in text, text
    code, text = _call(lab_cli.main, ["exec", "h0", "--bogus", "--", "true"])
    assert code == 2 and "unknown option --bogus" in text, text


def test_mrc_lab_export_into_a_missing_directory(tmp_path: Path) -> None:
    code, text = _call(lab_cli.main, ["export", "--machines", "2", "-o",
                                      str(tmp_path / "a" / "b")])  # fmt: skip
    assert code == 2 and "does not exist" in text and not (tmp_path / "a").exists()


# --- mrc-switch --check: configs with nonsense in their fields ------------------------------


def _a_config(tmp_path: Path) -> dict:
    lab_cli.main(["export", "--machines", "2", "-o", str(tmp_path / "x")])
    return json.loads((tmp_path / "x" / "config" / "switches" / "p0-t0-0.json").read_text())


def test_mrc_switch_check_refuses_nonsense_fields(tmp_path: Path) -> None:
    base = _a_config(tmp_path)
    bad_values = [None, -1, "abc", 1e309, [], {}, "", 2**70]
    cases = 0
    for key in ("name", "ports", "table", "stats"):
        for v in bad_values:
            cfg = dict(base, **{key: v})
            path = tmp_path / f"c{cases}.json"
            path.write_text(json.dumps(cfg))
            code, text = _call(switch_main.main, ["--check", "--config", str(path)])
            assert "Traceback" not in text, (key, v, text)
            assert code in (0, 2), (key, v, code, text)
            cases += 1
    for field in ("rate_bps", "buffer_bytes", "ecn_threshold_bytes", "mac", "interface"):
        for v in bad_values:
            port = dict(base["ports"][0], **{field: v})
            cfg = dict(base, ports=[port, *base["ports"][1:]])
            path = tmp_path / f"c{cases}.json"
            path.write_text(json.dumps(cfg))
            code, text = _call(switch_main.main, ["--check", "--config", str(path)])
            assert "Traceback" not in text and code in (0, 2), (field, v, text)
            if field != "interface" and v not in (None,):  # a name like "abc" may be real
                assert code == 2 and "bad config" in text, (field, v, text)
            cases += 1


def test_mrc_switch_check_sees_the_set(tmp_path: Path) -> None:
    base = _a_config(tmp_path)
    a = tmp_path / "a.json"
    a.write_text(json.dumps(base))
    code, text = _call(switch_main.main, ["--check", "--config", str(a), "--config", str(a)])
    assert code == 2 and "is also the name in" in text
    b = tmp_path / "b.json"
    b.write_text(json.dumps(dict(base, netns="mrcnosuchns-p0")))
    code, text = _call(switch_main.main, ["--check", "--config", str(b)])
    assert code == 2 and "does not exist" in text
    code, text = _call(switch_main.main, ["--check", "--config", str(a), "--log-level", "LOUD"])
    assert code == 2 and "invalid choice" in text
