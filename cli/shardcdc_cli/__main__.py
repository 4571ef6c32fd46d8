"""``python -m shardcdc_cli``: the ``shardcdc`` command."""

import sys

from shardcdc_cli.cli import main

sys.exit(main())
