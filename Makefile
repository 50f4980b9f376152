# mrc: the two commands a newcomer runs are `make demo` and `make test`.
# Every target does its own set-up; `make setup` is idempotent and quick when nothing changed.

.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
SETUP_INPUTS := pyproject.toml setup.py $(wildcard csrc/*.c csrc/*.h csrc/*.inc csrc/*.py)

# The main job: lab up, an MRC write through a T1 reboot and a link flap, the RoCEv2
# baseline under the same schedule, one screen of results, lab down. Root needed.
DEMO_ARGS ?=
demo: setup
	$(PY) -m lab.demo $(DEMO_ARGS)

.PHONY: reproduce fuzz soak soak-short demo bench setup test test-fast test-unit test-timing test-lab lint bench-core bench-transport bench-nscc bench-switch bench-nic bench-split bench-wakeup bench-lab-wait bench-sim lab-up lab-down lab-status clean help

help:
	@echo "make demo        the main job: lab up, MRC write through a T1 reboot and a link flap, vs RoCEv2 (root)"
	@echo "make test        set up, then run the whole test suite (unit + timing + lab; lab tests need root)"
	@echo "make test-fast   the same without the tests marked slow (over ~20 s each), for development"
	@echo "make setup       create .venv, install mrc with its test extras, build the C module"
	@echo "make lint        ruff (check, format) and mypy"
	@echo "make bench       end-to-end benchmarks on real labs -> results/bench-e2e-*.json (root, ~10 min)"
	@echo "make bench-core  C core vs pure-Python twin, ns per operation -> results/bench-core.json"
	@echo "make bench-transport  transport core pps and mrc-sim goodput -> results/bench-transport.json"
	@echo "make bench-nscc       NSCC on oversubscribed/lossy/incast sim fabrics -> results/bench-nscc.json"
	@echo "make bench-switch     mrc-switch vs kernel seg6local forwarding -> results/bench-switch.json"
	@echo "make bench-lab-cpu    machine CPU per delivered frame, python vs kernel switches, vs the floor -> results/bench-lab-cpu.json (root)"
	@echo "make bench-lab-wait   the lab's wait for a CPU per wake-up at 2 and 27 Mb/s, as it runs and with real-time scheduling -> results/bench-lab-wait.json (root)"
	@echo "make bench-wakeup     CPU per wake-up from sleep, across CPUs vs on one, and per timer arm -> results/bench-wakeup.json"
	@echo "make bench-nic        NIC frames per CPU-second, C and Python engines and the RoCEv2 QP vs raw AF_PACKET -> results/bench-nic.json (root)"
	@echo "make bench-split      a lab split over 2 machines (namespaces standing in) vs unsplit, one write -> results/bench-split.json (root)"
	@echo "make bench-sim        mrc-sim's speed over a whole fabric: permutations of 16, 128, 1,024 hosts -> results/bench-sim.json"
	@echo "make fuzz        1e6 hostile frames per target into NICs (both engines) and a switch -> results/fuzz.json (root)"
	@echo "make soak        30 min per transport of all-reduce under random faults -> results/soak.json (root); soak-short: 2 min"
	@echo "make reproduce   every published MRC claim as an experiment, MRC vs RoCEv2, in the lab and (--sim) at the paper's proportions in the simulator -> results/REPORT.md (root, < 1 h)"
	@echo "make calibrate   measure the link rate this machine carries (root; cached per boot in /run/mrc)"
	@echo "make lab-up / lab-down / lab-status   the namespace lab (root); flags via LAB_ARGS=..."

# tshark (Debian) checks the Wireshark dissector contrib/wireshark/mrc.lua in the tests
setup: $(STAMP)
	@command -v tshark >/dev/null || { test "$$(id -u)" = 0 && echo "make setup: installing tshark (Debian), which the Wireshark dissector's tests use" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null; } || echo "note: tshark is missing (Debian: tshark); the dissector's tests need it"
	@command -v nft >/dev/null || { test "$$(id -u)" = 0 && echo "make setup: installing nftables (Debian), which mrc-lab loss uses" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null; } || echo "note: nft is missing (Debian: nftables); mrc-lab loss needs it"

$(STAMP): $(SETUP_INPUTS)
	@test -f /usr/include/zlib.h || { test "$$(id -u)" = 0 && echo "make setup: installing zlib1g-dev (Debian), the C core's CRC header" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zlib1g-dev; } || { echo "the C core needs zlib's header (Debian: zlib1g-dev)"; exit 1; }
	@ldconfig -p | grep -q 'libdeflate\.so\.0' || { test "$$(id -u)" = 0 && echo "make setup: installing libdeflate0 (Debian), a faster CRC-32 for the ICRC" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libdeflate0; } || echo "note: without libdeflate0 the ICRC uses zlib's slower CRC-32"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,test]'
	$(PY) -c "import mrcnic._mrcfast" || { echo "C module mrcnic._mrcfast failed to build"; exit 1; }
	@touch $(STAMP)

# The unit tests on every core (pytest-xdist; they share no state), then the rest (the lab
# tests: one at a time, as each brings up its own lab and measures the machine)
UNIT_WORKERS ?= auto
test: setup
	$(PY) -m pytest -q -rs -n $(UNIT_WORKERS) tests/unit
	$(PY) -m pytest -q -rs --ignore=tests/unit tests

test-fast: setup
	$(PY) -m pytest -q -rs -m "not slow" tests

test-unit: setup
	$(PY) -m pytest -q tests/unit

test-timing: setup
	$(PY) -m pytest -q tests/timing

test-lab: setup
	$(PY) -m pytest -q tests/lab

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# End-to-end benchmarks on real labs (root; ~10 min): BENCH_ARGS="--only single,failures"
BENCH_ARGS ?=
bench: setup
	$(PY) bench/bench_e2e.py $(BENCH_ARGS)

bench-core: setup
	$(PY) bench/bench_core.py --out results/bench-core.json

bench-transport: setup
	$(PY) bench/bench_transport.py --out results/bench-transport.json

# NSCC scenarios (oversubscribed fabric, loss, incast); BASELINE_REV=<git rev> also runs an older transport
BASELINE_REV ?=
bench-nscc: setup
	$(PY) bench/bench_nscc.py $(if $(BASELINE_REV),--baseline-rev $(BASELINE_REV)) --out results/bench-nscc.json

bench-switch: setup
	$(PY) bench/bench_switch.py --out results/bench-switch.json

# Two namespaces, one veth: the NIC's engines against a minimal C sender and receiver (root, ~3 min)
bench-nic: setup
	$(PY) bench/bench_nic.py --out results/bench-nic.json

# How fast mrc-sim simulates a whole fabric: permutations of 16, 128 and 1,024 hosts, 3 runs each
# beside the Python twins (~5 min);
# HTSIM=path/to/htsim_uec runs the same permutations through htsim too (docs/sim.md, Speed)
bench-split: setup
	$(PY) bench/bench_split.py --out results/bench-split.json

# What a wake-up from sleep costs this machine, across CPUs and on one, and arming a timer (~10 s)
bench-wakeup: setup
	$(PY) bench/bench_wakeup.py --out results/bench-wakeup.json

bench-lab-wait: setup
	$(PY) bench/bench_lab_wait.py --out results/bench-lab-wait.json $(LAB_WAIT_ARGS)

bench-sim: setup
	$(PY) bench/bench_sim.py --out results/bench-sim.json $(if $(HTSIM),--htsim $(HTSIM))

# Hostile frames: 1,000,000 per target into NICs with live QPs (both engines, in process and
# over a veth) and a running mrc-switch (root) -> results/fuzz.json (about 3.5 minutes);
# FUZZ_ARGS="--frames 30000"
FUZZ_ARGS ?=
fuzz: setup
	$(PY) -m lab.fuzz $(FUZZ_ARGS)

# An all-reduce loop under a seeded schedule of random faults, MRC then the RoCEv2 baseline
# (root): 30 minutes each -> results/soak.json and .png (docs/design/reliability.md);
# soak-short: 2 minutes each. SOAK_ARGS="--seed 2 --events-per-min 6"
SOAK_ARGS ?=
soak: setup
	$(PY) -m lab.soak --minutes 30 $(SOAK_ARGS)

soak-short: setup
	$(PY) -m lab.soak --minutes 2 --out results/soak-short.json $(SOAK_ARGS)

# Every published MRC claim as an experiment, MRC beside RoCEv2 (root; under an hour):
# results/experiments/*.json + PNGs and results/REPORT.md. EXP_ARGS="--quick" for a smoke run
EXP_ARGS ?=
reproduce: setup
	$(PY) -m lab.cli experiment all $(EXP_ARGS)
	$(PY) -m lab.cli experiment all --sim $(EXP_ARGS)

# One write on python vs kernel switches, MRC and RoCEv2, and the machine's floor: whole-machine
# CPU per delivered frame (root). LAB_CPU_ARGS="--rate 10Mbit --configs floor,kernel" (the script's own flags)
LAB_CPU_ARGS ?=
bench-lab-cpu: setup
	$(PY) bench/bench_lab_cpu.py --out results/bench-lab-cpu.json $(LAB_CPU_ARGS)

# Lab: pass topology flags through LAB_ARGS, e.g. make lab-up LAB_ARGS="--planes 2 --switch kernel"
LAB_ARGS ?=
lab-up: setup
	$(VENV)/bin/mrc-lab up $(LAB_ARGS)

calibrate: setup
	$(VENV)/bin/mrc-lab calibrate $(LAB_ARGS)

lab-down: setup
	$(VENV)/bin/mrc-lab down $(LAB_ARGS)

lab-status: setup
	$(VENV)/bin/mrc-lab status $(LAB_ARGS)

clean:
	rm -rf build *.egg-info mrcnic/_mrcfast*.so mrcnic/_mrcfast.c
