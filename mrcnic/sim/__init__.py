"""mrc-sim: the real queue pairs over a deterministic virtual-time fabric."""
