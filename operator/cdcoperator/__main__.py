"""``python -m cdcoperator``: the same as ``shardcdc operator``."""

import sys

from cdcoperator.cli import main

sys.exit(main())
