"""``python -m ldptel.aggregator.cli``: the ``ldptel`` command."""

import sys

from ldptel.aggregator.cli.entry import main

sys.exit(main())
