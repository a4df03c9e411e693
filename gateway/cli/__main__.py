"""``python -m gateway.cli``: the ``gateway`` command without its console script."""

import sys

from gateway.cli import main

sys.exit(main())
