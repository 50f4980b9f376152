"""mrc-bench: benchmarks between lab hosts, their control channel and their orchestration."""
