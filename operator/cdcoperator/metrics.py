"""The operator's Prometheus metrics: one set of gauges per CdcConnector, from the watch stream.

A kopf event handler keeps the latest metadata, spec and status of every connector the operator
watches (status patches arrive as watch events too), and a collector turns them into samples when
``/metrics`` is scraped: no API reads, no state beyond the last body, nothing on the reconcile path.

Exported (labels ``namespace``, ``connector``; more where named)::

    shardcdc_operator_connectors                         connectors watched (no labels)
    shardcdc_operator_connector_ready                    1 when Ready=True for the current spec
    shardcdc_operator_connector_condition{type}          1 when the condition is True, else 0
    shardcdc_operator_connector_running                  1 when spec.state is running
    shardcdc_operator_connector_generation               status.assignment.generation
    shardcdc_operator_connector_tasks                    tasks of the current generation
    shardcdc_operator_connector_desired_tasks            spec.tasks
    shardcdc_operator_connector_serving_shards           serving shards streamed
    shardcdc_operator_connector_task_lag_seconds{task}   per task lag the operator last read
    shardcdc_operator_connector_lag_seconds              the largest of them
    shardcdc_operator_task_phase{task,phase}             1 for each task's current phase (taskStates[].phase)
    shardcdc_operator_backfill_phase{backfill,phase}     1 for each backfill's current phase
    shardcdc_operator_backfill_chunks_done{backfill}     chunks finished (status.backfills[].chunksDone)
    shardcdc_operator_backfill_chunks_total{backfill}    chunks planned (status.backfills[].chunksTotal)
    shardcdc_operator_backfill_rows{backfill}            rows emitted (status.backfills[].rows)
    shardcdc_operator_watch_events_total                 connector watch events seen
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import kopf
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from cdcoperator.apply import PLURAL
from cdcoperator.model import GROUP, VERSION, State
from cdcoperator.planner import TaskPhase
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["METRIC_NAMES", "REGISTRY", "STORE", "ConnectorMetrics", "start_metrics_server"]

BACKFILL_PHASES = ("Pending", "Running", "Succeeded", "Failed")
# Every phase gets a sample (0 or 1), so "Failed == 1" alerts and "Failed == 0" reads as healthy.
TASK_PHASES = tuple(p.value for p in TaskPhase)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def _seconds(text: object) -> float | None:
    m = _DURATION.match(str(text or ""))
    return float(m.group(1)) if m else None


class ConnectorMetrics:
    """Latest body per connector, and the collector reading it."""

    def __init__(self) -> None:
        self._bodies: dict[tuple[str, str], JsonObject] = {}
        self._events = 0
        self._lock = threading.Lock()

    def observe(self, event_type: str | None, body: JsonMapping) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            self._events += 1
            if event_type == "DELETED":
                self._bodies.pop(key, None)
            else:
                self._bodies[key] = {"metadata": dict(meta), "spec": dict(body.get("spec") or {}),
                                     "status": dict(body.get("status") or {})}

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            bodies = dict(self._bodies)
            events = self._events
        labels = ["namespace", "connector"]

        def family(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*labels, *extra])

        connectors = GaugeMetricFamily("shardcdc_operator_connectors", "Connectors the operator watches.")
        connectors.add_metric([], len(bodies))
        ready = family("shardcdc_operator_connector_ready", "1 when Ready=True for the current spec.")
        condition = family("shardcdc_operator_connector_condition", "1 when the condition is True.", ("type",))
        running = family("shardcdc_operator_connector_running", "1 when spec.state is running.")
        generation = family("shardcdc_operator_connector_generation", "Current task generation.")
        tasks = family("shardcdc_operator_connector_tasks", "Tasks of the current generation.")
        desired = family("shardcdc_operator_connector_desired_tasks", "spec.tasks.")
        shards = family("shardcdc_operator_connector_serving_shards", "Serving shards the connector streams.")
        task_lag = family("shardcdc_operator_connector_task_lag_seconds", "Lag of each task (status).", ("task",))
        lag = family("shardcdc_operator_connector_lag_seconds", "Largest task lag (status.lag).")
        # A crashed worker exports nothing: the operator's view of its task is what alerts on it.
        task_phase = family("shardcdc_operator_task_phase", "1 for each task's current phase (status).",
                            ("task", "phase"))
        backfill = family("shardcdc_operator_backfill_phase", "1 for each backfill's current phase.",
                          ("backfill", "phase"))
        # Backfill progress as the job reports it into status (the Spark executors have no scrape target).
        progress = {
            key: family(f"shardcdc_operator_backfill_{name}", doc, ("backfill",))
            for key, name, doc in (
                ("chunksDone", "chunks_done", "Chunks of the backfill finished."),
                ("chunksTotal", "chunks_total", "Chunks the backfill planned."),
                ("rows", "rows", "Rows the backfill emitted."),
            )
        }
        for (ns, name), body in sorted(bodies.items()):
            lv = [ns, name]
            meta, spec, status = body["metadata"], body["spec"], body["status"]
            conds = {str(c.get("type")): c for c in status.get("conditions") or ()}
            current = status.get("observedGeneration") == meta.get("generation")
            is_ready = (conds.get("Ready") or {}).get("status") == "True" and current
            ready.add_metric(lv, 1.0 if is_ready else 0.0)
            for type_, c in sorted(conds.items()):
                condition.add_metric([*lv, type_], 1.0 if c.get("status") == "True" else 0.0)
            running.add_metric(lv, 1.0 if (spec.get("state") or State.RUNNING) == State.RUNNING else 0.0)
            desired.add_metric(lv, float(spec.get("tasks") or 1))
            a = status.get("assignment") or {}
            if "generation" in a:
                generation.add_metric(lv, float(a["generation"]))
                tasks.add_metric(lv, float(a.get("tasks") or 0))
            shards.add_metric(lv, float((status.get("shards") or {}).get("servingCount") or 0))
            for t in a.get("taskStates") or ():
                if t.get("phase"):
                    for p in sorted({*TASK_PHASES, str(t["phase"])}):
                        task_phase.add_metric([*lv, str(t.get("id")), p], 1.0 if p == t["phase"] else 0.0)
                seconds = _seconds(t.get("lag"))
                if seconds is not None:
                    task_lag.add_metric([*lv, str(t.get("id"))], seconds)
            total = _seconds(status.get("lag"))
            if total is not None:
                lag.add_metric(lv, total)
            for bf in status.get("backfills") or ():
                phase = str(bf.get("phase") or "Pending")
                for p in sorted({*BACKFILL_PHASES, phase}):
                    backfill.add_metric([*lv, str(bf.get("id")), p], 1.0 if p == phase else 0.0)
                for key, fam in progress.items():
                    if isinstance(bf.get(key), (int, float)):
                        fam.add_metric([*lv, str(bf.get("id"))], float(bf[key]))
        yield connectors
        yield from (ready, condition, running, generation, tasks, desired, shards, task_lag, lag, task_phase,
                    backfill)
        yield from progress.values()
        watch = CounterMetricFamily("shardcdc_operator_watch_events", "Connector watch events seen.")
        watch.add_metric([], events)
        yield watch


STORE = ConnectorMetrics()
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(STORE)
METRIC_NAMES = tuple(m.name for m in STORE.collect())


@kopf.on.event(GROUP, VERSION, PLURAL)
def connector_event(event: JsonMapping, body: kopf.Body, **_: object) -> None:
    """Keep the latest body of each connector for the collector (no I/O)."""
    STORE.observe(event.get("type"), body)


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> None:
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr, registry=REGISTRY)
