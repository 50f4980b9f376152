"""``python -m lab.fuzz``: the command line of ``make fuzz`` (the workload is :mod:`lab.workloads.fuzz.run`)."""

import sys

from lab.workloads.fuzz.run import main

if __name__ == "__main__":
    sys.exit(main())
