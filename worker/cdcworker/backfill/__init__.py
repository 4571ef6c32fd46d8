"""Snapshot backfills: parallel, resumable, lock-free chunk reads reconciled with the live stream.

Pure planning: ``spec`` (inputs, chunk descriptors), ``chunking`` (split points, SQL),
``reconcile`` (DBLog/Flink CDC window merge), ``lanes`` (per-shard concurrency), ``throttle``,
``progress`` (progress-topic records, rate/ETA), ``handoff`` (which live events the worker emits
after a backfill), ``gtid`` (watermark comparisons).
I/O at the edges: ``vtgate`` (shard-targeted queries, watermark positions), ``store`` (progress
topic), ``job`` (driver planning, executor chunk processing, local and Spark engines), ``catchup``
(the post-backfill catch-up stream), ``cli`` (``shardcdc backfill``), ``spark_main``
(``spark-submit`` entry point). See docs/backfill.md.
"""

# The Spark version the job is built for: the pyspark the Spark image installs (its pin in
# constraints.txt, which a test keeps equal) and the SparkApplication's ``sparkVersion``.
SPARK_VERSION = "4.3.0"
