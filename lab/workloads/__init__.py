"""Workloads on a lab: mrc-bench tests, the published claims as experiments, the soak, the demo, calibration, fuzzing."""
