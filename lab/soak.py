"""``python -m lab.soak``: the command line of ``make soak`` (the workload is :mod:`lab.workloads.soak`)."""

import sys

from lab.workloads.soak import main

if __name__ == "__main__":
    sys.exit(main())
