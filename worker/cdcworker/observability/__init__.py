"""Metrics, health probes, the status document and logging for a worker task.

Typical use from the worker::

    tm = TaskMetrics(config.name, config.task.context_task_id, tags=config.behaviour.custom_metric_tags,
                     generation=config.task.generation)
    server = serve(tm, config.behaviour.metrics_port)   # None when the port is 0
    sm = tm.shard("-80", "commerce")                    # once per shard; keep the reference
    tm.on_response(len(resp.events), rows, filtered)    # per VStream response
    sm.on_commit(commit_ts, read_ts, emit_ts, records)  # per transaction
"""

from cdcworker.observability.health import Verdict, liveness, readiness
from cdcworker.observability.logs import configure_logging
from cdcworker.observability.metrics import (
    LATENCY_BUCKETS,
    STATES,
    LatencyHistogram,
    ShardMetrics,
    StageMetrics,
    TaskMetrics,
    grpc_code_name,
)
from cdcworker.observability.server import ObservabilityServer, serve
from cdcworker.observability.status import build_status

__all__ = [
    "LATENCY_BUCKETS",
    "STATES",
    "LatencyHistogram",
    "ObservabilityServer",
    "ShardMetrics",
    "StageMetrics",
    "TaskMetrics",
    "Verdict",
    "build_status",
    "configure_logging",
    "grpc_code_name",
    "liveness",
    "readiness",
    "serve",
]
