"""``python -m lab.demo``: the command line of ``make demo`` (the workload is :mod:`lab.workloads.demo`)."""

import sys

from lab.workloads.demo import main

if __name__ == "__main__":
    sys.exit(main())
