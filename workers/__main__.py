"""``python -m workers``: one learning worker, as ``online-ctr worker``."""

import sys

from online_ctr.cli import main

sys.exit(main(["worker", *sys.argv[1:]]))
