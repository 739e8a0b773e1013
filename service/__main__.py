"""``python -m service``: the HTTP API, as ``online-ctr api``."""

import sys

from online_ctr.cli import main

sys.exit(main(["api", *sys.argv[1:]]))
