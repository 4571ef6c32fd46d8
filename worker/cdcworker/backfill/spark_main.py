"""``spark-submit`` entry point: ``spark-submit [--master k8s://...] .../cdcworker/backfill/spark_main.py ARGS``.

ARGS are those of ``shardcdc backfill``; the engine is Spark and the master the one given to
spark-submit. Executors need the same image (cdcworker installed) as the driver.
"""

from __future__ import annotations

import sys

from cdcworker.backfill.cli import main

if __name__ == "__main__":
    sys.exit(main(["--engine", "spark", "--master", "", "--no-view", *sys.argv[1:]]))
