"""``python -m online_ctr.cli``: the ``online-ctr`` command."""

import sys

from online_ctr.cli.main import main

sys.exit(main())
