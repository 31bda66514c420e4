"""``python -m monitor.relay``: the relay process, as ``voxmeter relay`` runs it."""

import sys

from monitor.relay.process import main

if __name__ == "__main__":
    sys.exit(main())
