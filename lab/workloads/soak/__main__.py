"""``python -m lab.workloads.soak``: the same command line as ``python -m lab.soak``."""

import sys

from lab.workloads.soak.main import main

if __name__ == "__main__":
    sys.exit(main())
