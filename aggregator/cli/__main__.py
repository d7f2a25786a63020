"""``python -m ldptel.aggregator.cli``: the ``ldptel`` command."""

import sys

from ldptel.aggregator.cli import main

sys.exit(main())
