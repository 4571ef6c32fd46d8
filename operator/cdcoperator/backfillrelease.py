"""Releasing the workers from runs that will not finish: the operator's ``abandon`` markers.

While a run goes on, each shard's worker holds the run's tables back (docs/backfill.md). A run
that is cancelled (its ``spec.backfills[]`` entry removed, a ``stop-snapshot`` signal, the initial
snapshot no longer wanted) or failed for good (the Spark application or Job failed after its
retries) would hold them forever, so the operator writes a ``RunAbandoned`` record for it (no
epoch: the run is over, a rerun with its id is refused) and the workers catch the tables up.

The marker must not overtake the job: a chunk emitted after the workers released would put an
old snapshot row after newer live records. So it is written only once no pod of the run is
running any more (the objects are deleted first; the Spark driver and executors, the
spark-submit Job's pod and local mode's job processes all carry the run's labels). The job
itself abandons its own attempt when it fails or is stopped (``shardcdc backfill``); this record
also covers a job that could not (killed, out of memory).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cdcoperator.apply import ClusterApi, Kind
from cdcworker.backfill.progress import RunAbandoned
from cdcworker.jsontypes import JsonMapping

PODS = Kind("/api/v1", "pods")
_FINISHED_POD = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Release:
    run_id: str
    backfill_id: str  # the ``shardcdc.io/backfill`` label of the run's pods
    reason: str


def to_release(uid: str, runs: Mapping[str, JsonMapping], wanted: Mapping[str, str],
               ended: Mapping[str, str]) -> list[Release]:
    """Runs of this connector object to abandon (pure).

    ``runs``: the progress topic's fold (run id -> summary); ``wanted``: run id -> backfill id of the
    runs still requested; ``ended``: run id -> reason, for requested runs that failed for good and
    for known runs that were cancelled. A run of this object is one whose id ends with
    ``-<uid[:8]>`` (``backfill.run_id``), so runs started by hand with other ids are left alone.
    Complete runs hand off normally and runs already abandoned need nothing.
    """
    suffix = f"-{uid[:8]}"
    out = []
    for rid, summary in runs.items():
        total = int(summary.get("chunksTotal") or 0)
        if summary.get("abandoned") or (total and summary.get("chunksDone") == total):
            continue
        if rid in wanted:
            if rid in ended:
                out.append(Release(rid, wanted[rid], ended[rid]))
        elif uid and rid.endswith(suffix):
            out.append(Release(rid, rid[: -len(suffix)], ended.get(rid, "cancelled: no longer requested")))
    return out


def running(pods: Iterable[JsonMapping]) -> list[str]:
    """Names of the pods that may still run code (not yet in a final phase)."""
    return [str(p["metadata"]["name"]) for p in pods if (p.get("status") or {}).get("phase") not in _FINISHED_POD]


async def release(kube: ClusterApi, namespace: str, selector: str, keyspace: str, releases: Sequence[Release],
                  write: Callable[[RunAbandoned], None], label: str) -> list[Release]:
    """Write the abandon marker of each release whose run has no running pod left (``selector`` plus
    ``label=<backfill id>``); returns the ones written (the rest wait for a later reconcile)."""
    done = []
    for r in releases:
        pods = await kube.list_labelled(PODS, namespace, f"{selector},{label}={r.backfill_id}")
        if running(pods):
            continue
        write(RunAbandoned(r.run_id, keyspace, None, r.reason, "operator"))
        done.append(r)
    return done


__all__ = ["PODS", "Release", "release", "running", "to_release"]
