"""``python -m monitor.cli``: the same entry point as the ``voxmeter`` console script."""

import sys

from monitor.cli import main

sys.exit(main())
