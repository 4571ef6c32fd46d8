"""A Spark standalone cluster (master + workers, each its own JVM) on loopback for tests and benches.

``SparkCluster`` runs the PySpark distribution installed in the venv; ``submit`` starts
``spark-submit --master spark://...`` as the operator's ``sparkSubmit`` engine does on Kubernetes
(there in cluster mode; a standalone master runs Python drivers in client mode only).
"""

from __future__ import annotations

from sparkcluster.cluster import Executor, SparkCluster, SparkClusterError, alive, parent_pid, spark_home

__all__ = ["Executor", "SparkCluster", "SparkClusterError", "alive", "parent_pid", "spark_home"]
