"""Process and measurement helpers: starting and stopping lab processes, CPU meters, their JSON output, timelines."""
