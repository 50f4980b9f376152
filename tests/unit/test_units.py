"""mrcnic.units, the one parser of sizes, times and rates, and every command line that uses it:
each spelling, each refusal, and that mrc-sim, mrc-bench and mrc-lab read ``1.5M`` alike."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from lab import bench_cli
from lab import cli as lab_cli
from lab.fabric import params as lab_params
from lab.fabric.faults import LabError
from lab.fabric.faults import parse_rate as tc_rate
from lab.workloads import demo as lab_demo
from lab.workloads.bench import common as bench_common
from mrcnic import units
from mrcnic.errors import MrcError
from mrcnic.sim import incast
from mrcnic.sim import transfer as sim
from mrcnic.units import (
    UnitsError,
    in_unit,
    parse_rate,
    parse_size,
    parse_time,
    rate_arg,
    rate_in,
    size_arg,
    size_in,
    time_arg,
    time_in,
)

ROOT = Path(__file__).resolve().parents[2]
K, M, G, T = 1 << 10, 1 << 20, 1 << 30, 1 << 40

SIZES = [
    ("0", 0),
    ("4096", 4096),
    (" 4096 ", 4096),
    ("4096B", 4096),
    ("4096b", 4096),
    ("64K", 64 * K),
    ("64k", 64 * K),
    ("64KB", 64 * K),
    ("64kB", 64 * K),
    ("64kb", 64 * K),
    ("64KiB", 64 * K),
    ("64kib", 64 * K),
    ("64Ki", 64 * K),
    ("64 K", 64 * K),
    ("256M", 256 * M),
    ("256MB", 256 * M),
    ("256MiB", 256 * M),
    ("1.5M", 3 * M // 2),
    ("1.5MiB", 3 * M // 2),
    (".5K", 512),
    ("1G", G),
    ("1g", G),
    ("1GB", G),
    ("1GiB", G),
    ("2T", 2 * T),
    ("1TiB", T),
    ("1e3", 1000),
    ("1.5e3", 1500),
    ("2e1K", 20 * K),
    (65536, 65536),
    (0, 0),
]
BAD_SIZES = ["", " ", "x", "lots", "-3", "-1K", "1.5", "1.3K", "0.1M", "64X", "iB", "KB",
             "1 KiBB", "64Kbit", "1,5M", "1_000", "nan", "inf", "1e", -1, 1.5, True, None]  # fmt: skip

TIMES = [
    ("0", 0.0),
    ("0.5", 0.5),
    (".5", 0.5),
    ("2", 2.0),
    ("1.5s", 1.5),
    ("1.5 s", 1.5),
    ("10ms", 0.01),
    ("10MS", 0.01),
    ("200us", 200e-6),
    ("200µs", 200e-6),
    ("200μs", 200e-6),
    ("20ns", 20e-9),
    ("2e-5", 2e-5),
    ("1e3ms", 1.0),
    (0.25, 0.25),
    (3, 3.0),
]
BAD_TIMES = ["", "x", "10 m", "10min", "1h", "-1ms", "10msec", "s", "1.5.s", -0.5, None]

RATES = [
    ("800", 800.0),
    ("8000bit", 8000.0),
    ("8000bits", 8000.0),
    ("8000bps", 8000.0),
    ("500k", 500e3),
    ("500kbit", 500e3),
    ("500Kbps", 500e3),
    ("100M", 100e6),
    ("100m", 100e6),
    ("100Mbit", 100e6),
    ("100mbit", 100e6),
    ("100Mbits", 100e6),
    ("100Mbps", 100e6),
    ("100mbps", 100e6),
    ("100Mbit/s", 100e6),
    ("100Mb/s", 100e6),
    ("100 Mbit", 100e6),
    ("2.5mbit", 2.5e6),
    ("1.5M", 1.5e6),
    ("1G", 1e9),
    ("1g", 1e9),
    ("1gbit", 1e9),
    ("1Gbit", 1e9),
    ("25Gbps", 25e9),
    ("25G", 25e9),
    ("1T", 1e12),
    ("1e8", 1e8),
    (100e6, 100e6),
    (800, 800.0),
]
BAD_RATES = ["", "fast", "100Mb", "100MB/s", "100MBps", "100 Mbyte", "-1mbit", "1.5.M", "100Mibit", "M",
             "100Mbit/sec", None, -1]  # fmt: skip


@pytest.mark.parametrize(("text", "want"), SIZES)
def test_size_spellings(text, want):
    got = parse_size(text)
    assert got == want and isinstance(got, int)


@pytest.mark.parametrize("text", BAD_SIZES)
def test_bad_sizes_name_the_accepted_forms(text):
    with pytest.raises(UnitsError) as e:
        parse_size(text)
    msg = str(e.value)
    assert repr(text) in msg
    assert "64K" in msg and "1.5M" in msg and "1024" in msg  # the forms, and that K is binary


@pytest.mark.parametrize(("text", "want"), TIMES)
def test_time_spellings(text, want):
    assert parse_time(text) == pytest.approx(want, rel=1e-12, abs=0)


@pytest.mark.parametrize("text", BAD_TIMES)
def test_bad_times_name_the_accepted_forms(text):
    with pytest.raises(UnitsError, match=r"10ms.*200us"):
        parse_time(text)


@pytest.mark.parametrize(("text", "want"), RATES)
def test_rate_spellings(text, want):
    assert parse_rate(text) == want


@pytest.mark.parametrize("text", BAD_RATES)
def test_bad_rates_name_the_accepted_forms(text):
    with pytest.raises(UnitsError, match=r"100M.*1gbit.*25Gbps"):
        parse_rate(text)


def test_byte_rates_are_refused_as_bytes():
    for text in ("100MB/s", "100MBps", "1GBps"):
        with pytest.raises(UnitsError, match="are bytes; give bits"):
            parse_rate(text)


def test_errors_are_value_errors_and_mrc_errors():
    assert issubclass(UnitsError, MrcError) and issubclass(UnitsError, ValueError)
    with pytest.raises(ValueError):
        parse_size("1.3K")


def test_binary_sizes_decimal_rates_exact_times():
    assert parse_size("1K") == 1024 and parse_rate("1k") == 1000.0
    assert parse_time("0.1s") == 0.1 and parse_time("100ms") == 0.1  # no 0.1000...01
    assert parse_time("3us") == 3e-6


@pytest.mark.parametrize(
    ("kind", "text", "unit", "whole", "want"),
    [
        ("size", "64", 1024, False, 64),
        ("size", "64K", 1024, False, 64),
        ("size", "1.5M", 1024, False, 1536),
        ("size", 64, 1024, False, 64),  # a YAML number is in the key's unit
        ("size", "1M", 1, False, 1 << 20),
        ("rate", "100", 1e6, False, 100.0),
        ("rate", "100M", 1e6, False, 100.0),
        ("rate", "100mbit", 1e6, False, 100.0),
        ("rate", "1G", 1e6, False, 1000.0),
        ("rate", "2.5mbit", 1e6, False, 2.5),
        ("rate", "1.5M", 1e6, False, 1.5),
        ("time", "400", 1e-3, False, 400.0),
        ("time", "0.4s", 1e-3, False, 400.0),
        ("time", "250", 1e-3, True, 250),
        ("time", "0.25s", 1e-3, True, 250),
        ("time", "1.5", 1, False, 1.5),
    ],
)
def test_in_unit(kind, text, unit, whole, want):
    got = in_unit(kind, text, unit, whole)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    ("kind", "text", "unit", "whole", "match"),
    [
        ("size", "100B", 1024, False, "whole number of KiB"),
        ("size", "1.5", 1024, False, "whole number of KiB"),
        ("size", "-1", 1024, False, "bad size '-1'"),
        ("time", "0.5ms", 1e-3, True, "whole number of ms"),
        ("rate", "fast", 1e6, False, "bad rate"),
    ],
)
def test_in_unit_refusals(kind, text, unit, whole, match):
    with pytest.raises(UnitsError, match=match):
        in_unit(kind, text, unit, whole)


# -- argparse -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typ", "text", "want"),
    [
        (size_arg, "1.5M", 1572864),
        (time_arg, "10ms", 0.01),
        (rate_arg, "100Mbit", 100e6),
        (size_in(1024), "1.5M", 1536),
        (rate_in(1e6), "1G", 1000.0),
        (time_in(1e-3), "2s", 2000.0),
        (time_in(1e-3, whole=True), "250", 250),
    ],
)
def test_argparse_types(typ, text, want):
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--x", type=typ)
    assert p.parse_args(["--x", text]).x == want


@pytest.mark.parametrize(
    ("typ", "text", "words"),
    [
        (size_arg, "1.5x", "bad size '1.5x'"),
        (time_arg, "soon", "bad time 'soon'"),
        (rate_arg, "fast", "bad rate 'fast'"),
        (size_in(1024), "100B", "whole number of KiB"),
    ],
)
def test_argparse_types_make_usage_errors(capsys, typ, text, words):
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--x", type=typ)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--x", text])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage: t" in err and "argument --x" in err and words in err


# -- every command line reads the same value the same way ------------------------------------------


def _sim(*a: str) -> argparse.Namespace:
    return sim.build_parser().parse_args(list(a))


def _bench(*a: str) -> argparse.Namespace:
    return bench_cli.build_parser().parse_args(list(a))


def _lab(*a: str) -> argparse.Namespace:
    return lab_cli.build_parser().parse_args(list(a))


@pytest.mark.parametrize("text", ["1.5M", "64K", "4096", "1GiB", "2MB", "3k"])
def test_every_cli_reads_a_size_alike(text):
    want = parse_size(text)
    assert _sim("--size", text).size == want
    assert _sim("--msg-size", text).msg_size == want
    assert _sim("--queue", text).queue == want
    assert incast.build_parser().parse_args(["--size", text]).size == want
    assert _bench("write", "--size", text).size == want
    assert _bench("write", "--region", text).region == want
    assert _bench("lat", "--size", text).size == want
    assert _bench("allreduce", "--size", text).size == want
    assert lab_demo.build_parser().parse_args(["--size", text]).size == want
    # mrc-lab's sizes are flags in KiB: the same bytes counted in KiB (a plain number is KiB)
    kib = int(text) if text.isdigit() else want // 1024
    assert _lab("up", "--buffer-kb", text).buffer_kb == kib
    assert _lab("plan", "--ecn-kb", text).ecn_kb == kib


def test_one_point_five_m_is_one_value_everywhere():
    """The bug of issue 10: ``--size 1.5M`` worked in mrc-bench and failed in mrc-sim."""
    assert _sim("--size", "1.5M").size == 1572864
    assert _bench("write", "--size", "1.5M").size == 1572864
    assert _lab("up", "--buffer-kb", "1.5M").buffer_kb == 1536  # KiB: 1536 x 1024 = 1572864
    # as a rate, 1.5M is 1.5 Mbit/s everywhere (decimal)
    assert _sim("--port-rate", "1.5M").port_rate == 1.5e6
    assert _lab("up", "--rate-mbit", "1.5M").rate_mbit == 1.5
    assert _lab("shape", "a", "b", "--rate", "1.5M").rate == 1_500_000
    assert lab_params.resolve(None, rate_mbit="1.5M", buffer_kb="1.5M").buffer_bytes == 1572864


@pytest.mark.parametrize("text", ["100M", "100Mbit", "100mbit", "1G", "1gbit", "2.5mbit"])
def test_every_cli_reads_a_rate_alike(text):
    want = parse_rate(text)
    assert _sim("--port-rate", text).port_rate == want
    assert _sim("--path-rate", text).path_rate == want
    assert incast.build_parser().parse_args(["--port-rate", text]).port_rate == want
    assert _lab("up", "--rate-mbit", text).rate_mbit * 1e6 == pytest.approx(want)
    assert lab_demo.build_parser().parse_args(["--rate-mbit", text]).rate_mbit * 1e6 == (
        pytest.approx(want)
    )
    assert _lab("shape", "a", "b", "--rate", text).rate == want


@pytest.mark.parametrize("text", ["1.5s", "400ms", "2"])
def test_every_cli_reads_a_time_alike(text):
    want = parse_time(text)
    assert _sim("--delay", text).delay == want
    assert _sim("--max-time", text).max_time == want
    assert incast.build_parser().parse_args(["--stagger", text]).stagger == want
    assert _bench("write", "--duration", text).duration == want
    assert _bench("write", "--timeout", text).timeout_s == want
    assert lab_demo.build_parser().parse_args(["--duration", text]).duration == want
    # the ms flags: a plain number is ms, a spelled-out time is converted
    ms = _lab("flap", "a", "b", "--period-ms", text).period_ms
    assert ms == (float(text) if text.isdigit() else pytest.approx(want * 1000))
    assert _lab("reboot", "s", "--down-ms", "1.5s").down_ms == 1500.0


def test_plain_numbers_keep_their_flags_units():
    """The lab's flags are a contract: ``--rate-mbit 100 --buffer-kb 64 --period 400ms``."""
    a = _lab("up", "--rate-mbit", "100", "--buffer-kb", "64", "--ecn-kb", "16")
    assert (a.rate_mbit, a.buffer_kb, a.ecn_kb) == (100.0, 64, 16)
    assert _lab("flap", "a", "b", "--period-ms", "400").period_ms == 400.0
    assert _lab("reboot", "s").down_ms == 1000.0
    assert _bench("write", "--timeline-ms", "100").timeline_ms == 100.0
    d = lab_demo.build_parser().parse_args(["--timeline-ms", "0.5s"])
    assert d.timeline_ms == 500 and isinstance(d.timeline_ms, int)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--size", "lots"], "bad size 'lots'"),
        (["--size", "1.5"], "not a whole number of bytes"),
        (["--port-rate", "fast"], "bad rate 'fast'"),
        (["--delay", "soon"], "bad time 'soon'"),
    ],
)
def test_mrc_sim_usage_errors_name_the_forms(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        sim.main(argv)
    assert e.value.code == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["up", "--buffer-kb", "100B"], "whole number of KiB"),
        (["up", "--rate-mbit", "fast"], "bad rate 'fast'"),
        (["shape", "a", "b", "--rate", "10mbps"], "bytes per second"),
        (["shape", "a", "b", "--rate", "1kbit"], "below 8kbit"),
        (["flap", "a", "b", "--period-ms", "soon"], "bad time 'soon'"),
    ],
)
def test_mrc_lab_usage_errors(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        _lab(*argv)
    assert e.value.code == 2
    assert words in capsys.readouterr().err


def test_mrc_bench_usage_errors(capsys):
    with pytest.raises(SystemExit) as e:
        bench_cli.main(["write", "--size", "1.3K"])
    assert e.value.code == bench_cli.EXIT_USAGE
    assert "not a whole number of bytes" in capsys.readouterr().err


def test_tc_rates_for_shape():
    """``mrc-lab shape`` speaks tc: everything units reads, except ``bps`` (bytes to tc)."""
    assert tc_rate("10mbit") == 10_000_000 and tc_rate("10M") == 10_000_000
    assert tc_rate("2.5mbit") == 2_500_000 and tc_rate(2_000_000) == 2_000_000
    for bad in ("10 mbps", "10Mbps", "", "fast", "-1mbit", "1kbit"):
        with pytest.raises(LabError):
            tc_rate(bad)


def test_topology_file_values(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("planes: 2\nrate_mbit: 1G\nbuffer_kb: 1.5M\necn_kb: 64K\n")
    p = lab_params.resolve(str(f))
    assert (p.rate_mbit, p.buffer_kb, p.ecn_kb) == (1000.0, 1536, 64)
    f.write_text("rate_mbit: 50\nbuffer_kb: 128\n")
    p = lab_params.resolve(str(f))
    assert (p.rate_mbit, p.buffer_kb) == (50, 128)
    f.write_text("buffer_kb: lots\n")
    with pytest.raises(lab_params.ParamError, match="buffer_kb: bad size 'lots'"):
        lab_params.resolve(str(f))


def test_old_names_point_at_the_one_parser():
    assert sim.parse_size is units.parse_size and sim.parse_rate is units.parse_rate
    assert sim.parse_time is units.parse_time
    assert bench_common.parse_size is units.parse_size


def test_no_other_unit_parser_is_left():
    """Every ``def parse_size/_time/_rate`` outside mrcnic/units.py must delegate to it."""
    found = []
    for pkg in ("mrcnic", "mrcswitch", "lab", "bench"):
        for path in (ROOT / pkg).rglob("*.py"):
            if path.name == "units.py":
                continue
            text = path.read_text()
            for m in re.finditer(r"^def (parse_(?:size|time|rate))\(", text, re.M):
                body = text[m.end() : m.end() + 1200]
                if "units." not in body:
                    found.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
    assert found == []


@pytest.mark.parametrize(
    ("parser", "words"),
    [
        (sim.build_parser, ["--size BYTES", "--rate RATE", "--delay TIME", "binary"]),
        (incast.build_parser, ["--size BYTES", "--rate RATE", "--stagger TIME"]),
        (lab_demo.build_parser, ["--size BYTES", "--rate R"]),
    ],
)
def test_help_names_the_units(capsys, parser, words):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for w in words:
        assert w in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["up", "--help"], ["--rate RATE", "--buffer SIZE", "1.5M"]),
        (["shape", "--help"], ["--rate RATE", "10mbit"]),
        (["flap", "--help"], ["--period TIME"]),
    ],
)
def test_lab_help_names_the_units(capsys, argv, words):
    with pytest.raises(SystemExit):
        _lab(*argv)
    out = " ".join(capsys.readouterr().out.split())
    for w in words:
        assert w in out


def test_bench_help_names_the_units(capsys):
    with pytest.raises(SystemExit):
        _bench("write", "--help")
    out = " ".join(capsys.readouterr().out.split())
    assert "--size BYTES" in out and "--region BYTES" in out and "--duration SECONDS" in out
