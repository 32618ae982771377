"""Run the trace simulator: ``python -m jobmanager.simulate --help``."""

import sys

from jobmanager.simulate.cli import main

if __name__ == "__main__":
    sys.exit(main())
