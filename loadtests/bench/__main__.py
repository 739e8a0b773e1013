"""``python -m loadtests.bench`` (``make bench``): every benchmark section, one report."""

import sys

from loadtests.bench.run import main

if __name__ == "__main__":
    sys.exit(main())
