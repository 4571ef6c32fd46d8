"""Operator benchmark against the real API server: ``kubectl apply`` of a CdcConnector to every task
Deployment created (and to Ready), and ``kubectl scale`` to the new generation running.

The operator (kopf, ``cdcoperator.handlers``) runs as its own process (``python -m cdcoperator``) against the
kubetest control plane (real etcd + kube-apiserver, ``make kube``); shards come from the VTGate
test server (vtctld ``FindAllShardsInKeyspace``), which answers at once; a real Kafka broker
(``localkafka``) holds no offsets, so the scan before generation 0 finds nothing to adopt. There is
no kubelet: ``FakeNodes`` (``kubetest.fakenodes``, the tests' stand-in for the Deployment
controller and kubelet) runs as its own process and keeps one Running/Ready pod per Deployment
replica on 127.0.0.1, each with a ``/status`` document saying ``streaming`` — what the operator
reads of a worker. A drained generation's workers exit as soon as FakeNodes deletes their pods.

    .venv/bin/python bench/operator_scale.py --shards 1 16 256 --runs 3

For each shard count N, per run (the connector ``cN`` is deleted after each run):

* apply with ``tasks: N``: time to all N Deployments of generation 0, and to ``Ready=True`` for
  generation 0 (N pods Running, every status document streaming, observed by the operator);
* N > 1: ``kubectl scale --replicas=N/2``: time until generation 0's last pod is gone (the drain),
  to generation 1's N/2 Deployments, to their N/2
  pods Running/Ready, and to ``Ready=True`` (``AllTasksStreaming``) for generation 1 with
  ``observedGeneration`` current: the new generation running, issue 6's figure;
* N = 1: ``kubectl scale --replicas=2``: the task count is ``min(spec.tasks, shards)`` = 1 still,
  so no new generation starts; the figure is the time until the status has observed the new spec
  (``observedGeneration``) and still says Ready for generation 0 with one task, and the script
  checks that no generation-1 object appeared.

The floor (``--floor``, before each apply): the same N Deployments (``build_deployment``'s shape,
no owner) created straight through ``KubeApi`` at the operator's concurrency, FakeNodes starting
their pods meanwhile as in the apply, then deleted: what the API server on this machine takes for
the creations alone, against which ``apply -> all Deployments`` shows the operator's own share.

``--busy 2`` runs each run twice, quiet and then beside two processes spinning on the CPU
(``BusyLoad``), reported as rows ``<N> +2 busy``: how each figure moves with load, paired run by
run. Each run's load is the mean number of runnable processes during it (``RunQueue``; the 1-minute
load average at its start is printed too, but lags).

Besides wall times (which follow the machine's load), each run reports the operator's CPU seconds
and, for a scale, its API writes by verb and resource from the API server's own
``apiserver_request_total`` (the kinds only the operator writes), which a loaded machine does not move.

The drain takes a second reconcile after the workers exited, and Ready a third once the new
workers are ready: the pod events that complete those steps trigger them
(``podwatch`` kicks ``handlers._kick``), so the resync interval (``--resync``, default 1 s; the chart's
default is 10 s) no longer bounds the scale time (``--resync 30`` gives the same figures). Polling
the API every 20 ms is the measurement's resolution.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdcoperator.apply import METADATA_LIST

ROOT = Path(__file__).resolve().parent.parent
NS = "bench"
GROUP_PATH = f"/apis/shardcdc.io/v1alpha1/namespaces/{NS}/cdcconnectors"

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"  # a list as kubectl get prints it: rows of columns
OPERATOR_KINDS = ("deployments", "configmaps", "cdcconnectors", "events")
WRITE_VERBS = ("POST", "PATCH", "DELETE", "DELETECOLLECTION")

# Figure -> its table heading, in print order.
FIGURES = {
    "apply_deployments": "apply -> all Deployments",
    "apply_ready": "apply -> Ready (gen 0)",
    "scale_drained": "scale -> old gen's pods gone",
    "scale_deployments": "scale -> new gen's Deployments",
    "scale_pods": "scale -> new gen's pods Running",
    "scale_ready": "scale -> new gen Ready",
    "scale_observed": "scale 1->2 -> observed, same gen Ready",
    "floor_deployments": "floor: N Deployments created, no operator",
    "apply_cpu": "operator CPU-s, apply -> Ready",
    "scale_cpu": "operator CPU-s, scale -> Ready",
    "scale_writes": "operator API writes, scale -> Ready",
}


@dataclass
class Results:
    figures: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in FIGURES})
    loads: list[float] = field(default_factory=list)  # 1-minute load average as each run starts
    runnable: list[float] = field(default_factory=list)  # mean runnable processes during each run (RunQueue)

    def row(self, shards: str) -> str:
        cells = []
        for key in FIGURES:
            xs = self.figures[key]
            if key.endswith("_writes"):  # a count of requests, not seconds
                cells.append(f"{statistics.median(xs):.0f} ({', '.join(f'{x:.0f}' for x in xs)})" if xs else "n/a")
                continue
            cells.append(f"{statistics.median(xs):.2f} s ({', '.join(f'{x:.2f}' for x in xs)})" if xs else "n/a")
        return f"| {shards} | " + " | ".join(cells) + " |"


class Probe:
    """Reads what the measurement waits for: the connector's status, its Deployments and pods."""

    def __init__(self, kube: Any, timeout: float, lists: str = "table") -> None:
        self.kube, self.timeout = kube, timeout
        # "metadata": the heavy lists this probe used before (kept to measure what they cost, --probe-lists)
        self.table = lists == "table"

    def connector(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"{GROUP_PATH}/{name}", allow=(404,)) or {}

    def _count(self, kind: str, name: str, gen: int, fields: str = "") -> int:
        """How many objects match, read as a Table of rows without their objects: the probe's own
        load on the API server it measures (on the same two cores) must stay small. A metadata-only
        list of 1,024 Deployments is 6 MB (managedFields and annotations) and took the API server
        150-250 ms, polled every 20 ms; this Table is 0.3 MB and 14-20 ms."""
        prefix = "/apis/apps/v1" if kind == "deployments" else "/api/v1"
        query = {"labelSelector": f"shardcdc.io/connector={name},shardcdc.io/generation={gen}"}
        if self.table:
            query["includeObject"] = "None"
        if fields:
            query["fieldSelector"] = fields
        api = self.kube.api
        method, url, headers, body, post = api.param_serialize(
            "GET", f"{prefix}/namespaces/{NS}/{kind}?{urllib.parse.urlencode(query)}",
            header_params={"Accept": TABLE if self.table else METADATA_LIST}, auth_settings=["BearerToken"])
        resp = api.call_api(method, url, headers, body, post, _request_timeout=30)
        if resp.status != 200:
            raise SystemExit(f"listing {kind}: HTTP {resp.status}: {resp.read()[:300]!r}")
        return len(json.loads(resp.read())["rows" if self.table else "items"] or ())

    def writes(self) -> collections.Counter[str]:
        """The API server's count of the operator's write requests so far (``apiserver_request_total``):
        every POST/PATCH/DELETE/DELETECOLLECTION on the kinds only the operator writes (FakeNodes
        writes pods, the probe only reads), by verb and resource; robust where wall times are not."""
        api = self.kube.api
        method, url, headers, body, post = api.param_serialize(
            "GET", "/metrics", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"])
        text = api.call_api(method, url, headers, body, post, _request_timeout=30).read().decode()
        out: collections.Counter[str] = collections.Counter()
        for m in re.finditer(r'^apiserver_request_total\{(.*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("resource") in OPERATOR_KINDS and labels.get("verb") in WRITE_VERBS:
                sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
                out[f"{labels['verb']} {labels['resource']}{sub}"] += int(float(m.group(2)))
        return out

    def deployments(self, name: str, gen: int) -> int:
        return self._count("deployments", name, gen)

    def pods(self, name: str, gen: int) -> int:
        """Pods of the generation, whatever their phase (a drained one has none left)."""
        return self._count("pods", name, gen)

    def running_pods(self, name: str, gen: int) -> int:
        """Pods in phase Running (FakeNodes marks a pod Running and Ready in one status write)."""
        return self._count("pods", name, gen, "status.phase=Running")

    def ready(self, name: str, gen: int, tasks: int) -> bool:
        """Ready=True for the current spec, in generation ``gen`` with ``tasks`` tasks."""
        body = self.connector(name)
        status = body.get("status") or {}
        a = status.get("assignment") or {}
        cond = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
        return (status.get("observedGeneration") == (body.get("metadata") or {}).get("generation")
                and a.get("generation") == gen and a.get("tasks") == tasks
                and (cond.get("status"), cond.get("reason")) == ("True", "AllTasksStreaming"))

    def wait(self, pred: Callable[[], bool], what: str, since: float) -> float:
        """Seconds from ``since`` until ``pred`` holds."""
        deadline = time.monotonic() + self.timeout
        while not pred():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {what}")
            time.sleep(0.02)  # polling the API: the measurement's resolution
        return time.monotonic() - since


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of the process (fields 14 and 15 of /proc/<pid>/stat, after the command name)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BusyLoad:
    """``count`` processes spinning on the CPU while the block runs: the same figures on a loaded
    machine (issue 30: "how each figure moves with load"), reproducible rather than whatever else
    the machine happens to run. Each spinner is one runnable process, so on this 2-core VM two of
    them add ~2 to the load average the bench itself makes (~1.5-2)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BusyLoad:
        from cdcoperator.local.children import start_bound

        self.procs = [start_bound([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        return self

    def __exit__(self, *exc: object) -> None:
        from cdcoperator.local.children import stop_group

        for p in self.procs:
            stop_group(p, timeout=5, kill=True)
        self.procs = []


class RunQueue:
    """The machine's load while the block runs, as the mean number of runnable processes
    (``procs_running`` in /proc/stat, sampled every 50 ms by a thread that does not count itself):
    the 1-minute load average lags a 15 s run by most of a minute, so it cannot tell a quiet run
    from the loaded one right after it."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="runqueue", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for line in Path("/proc/stat").read_text().splitlines():
                if line.startswith("procs_running "):
                    self.samples.append(int(line.split()[1]) - 1)  # less this thread, running as it reads

    def __enter__(self) -> RunQueue:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(url: str) -> bool:
    """The operator's liveness endpoint answers once kopf's loop is up."""
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def floor(probe: Probe, kubeconfig: str, sim_address: str, bootstrap: str, n: int, res: Results) -> None:
    """N Deployments of the operator's shape created at its concurrency, with no operator: the API
    server's share of ``apply -> all Deployments``; then deleted, their pods gone."""
    import asyncio

    from cdcoperator.apply import DEPLOYMENTS, KubeApi, new_api_client
    from cdcoperator.model import ConnectorResource
    from cdcoperator.objects import build_config_map, build_deployment
    from cdcoperator.planner import TaskPlan

    name = f"floor{n}"
    cr = ConnectorResource.from_body({"metadata": {"name": name, "namespace": NS, "uid": ""}, "spec": {
        "source": {"vitess": {"vtgate": sim_address, "keyspace": f"ks{n}"}},
        "kafka": {"bootstrapServers": bootstrap, "topicPrefix": name}, "tasks": n}})
    cm = build_config_map(cr, 0)
    deployments = [build_deployment(cr, TaskPlan(0, i, n, -1, (str(i),), True), cm) for i in range(n)]
    for dep in deployments:
        del dep["metadata"]["ownerReferences"]  # no connector object to own them
    kube = KubeApi(new_api_client(kubeconfig))  # the operator's client: a pooled connection per call in flight

    async def create() -> None:
        await asyncio.gather(*(kube.apply(dep, None) for dep in deployments))

    t0 = time.monotonic()
    asyncio.run(create())
    res.figures["floor_deployments"].append(time.monotonic() - t0)
    asyncio.run(kube.delete_generation(DEPLOYMENTS, NS, name, 0, range(n)))
    kube.close()
    probe.wait(lambda: probe.running_pods(name, 0) == 0, f"{name}'s pods gone", time.monotonic())


def one_run(plane: Any, probe: Probe, sim_address: str, bootstrap: str, n: int, res: Results,
            cpu: Callable[[], float]) -> str:
    """One apply and scale of an N-shard connector; ``cpu()`` is the operator's CPU time so far: its
    own work per step, which a loaded machine stretches in wall time but not in CPU seconds."""
    name = f"c{n}"  # the same names every run: FakeNodes keeps one status server per Deployment name
    body = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": {"vitess": {"vtgate": sim_address, "vtctld": sim_address, "keyspace": f"ks{n}"}},
                     "kafka": {"bootstrapServers": bootstrap, "topicPrefix": name},
                     "tasks": n}}
    f = res.figures
    t0, c0 = time.monotonic(), cpu()
    plane.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(body), check=True)
    f["apply_deployments"].append(probe.wait(lambda: probe.deployments(name, 0) == n, f"{n} Deployments", t0))
    f["apply_ready"].append(probe.wait(lambda: probe.ready(name, 0, n), f"{name} Ready in generation 0", t0))
    f["apply_cpu"].append(cpu() - c0)
    if n > 1:
        half = n // 2
        t0, c0, w0 = time.monotonic(), cpu(), probe.writes()
        plane.kubectl("-n", NS, "scale", f"cdc/{name}", f"--replicas={half}", check=True)
        f["scale_drained"].append(probe.wait(lambda: probe.pods(name, 0) == 0, "gen 0 pods gone", t0))
        f["scale_deployments"].append(probe.wait(lambda: probe.deployments(name, 1) == half, "gen 1 objects", t0))
        f["scale_pods"].append(probe.wait(lambda: probe.running_pods(name, 1) == half, "gen 1 pods", t0))
        f["scale_ready"].append(probe.wait(lambda: probe.ready(name, 1, half), f"{name} Ready in gen 1", t0))
        f["scale_cpu"].append(cpu() - c0)
        writes = probe.writes() - w0
        f["scale_writes"].append(float(sum(writes.values())))
        note = (f"scale {n}->{half}: Deployments {f['scale_deployments'][-1]:.2f}s, pods {f['scale_pods'][-1]:.2f}s, "
                f"Ready {f['scale_ready'][-1]:.2f}s, operator CPU {f['scale_cpu'][-1]:.2f}s, "
                f"API writes {dict(sorted(writes.items()))}")
    else:
        t0 = time.monotonic()
        plane.kubectl("-n", NS, "scale", f"cdc/{name}", "--replicas=2", check=True)
        f["scale_observed"].append(probe.wait(lambda: probe.ready(name, 0, 1), f"{name} observed tasks: 2", t0))
        assert probe.deployments(name, 1) == 0, "a 1-shard connector started a generation 1"
        a = probe.connector(name)["status"]["assignment"]
        note = f"scale 1->2: still generation {a['generation']} with {a['tasks']} task ({f['scale_observed'][-1]:.2f}s)"
    # The figures are printed before the clean-up (deleting 1,024 tasks' objects on a loaded machine
    # outlasted kubectl's own timeout once, and the run's figures went with the exception).
    print(f"{name}: {json.dumps({k: round(v[-1], 2) for k, v in f.items() if v})}", file=sys.stderr, flush=True)
    plane.kubectl("-n", NS, "delete", "cdc", name, "--wait=true", f"--timeout={probe.timeout:.0f}s", check=True,
                  timeout=probe.timeout + 30)
    probe.wait(lambda: probe.running_pods(name, 0) + probe.running_pods(name, 1) == 0, "pods gone", time.monotonic())
    return (f"apply->Deployments {f['apply_deployments'][-1]:.2f}s, ->Ready {f['apply_ready'][-1]:.2f}s "
            f"(operator CPU {f['apply_cpu'][-1]:.2f}s), {note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--resync", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--profile", default="", help="run the operator under cProfile, its stats written here at exit")
    parser.add_argument("--logs", default="", help="keep the operator's and FakeNodes' logs in this directory")
    parser.add_argument("--json", default="", help="write every run's figures and load average to this file")
    parser.add_argument("--probe-lists", choices=("table", "metadata"), default="table",
                        help="how the probe counts objects: Table rows (light), or the metadata-only lists it used "
                             "before (to measure what the probe's own load cost the figures)")
    parser.add_argument("--operator-debug", action="store_true",
                        help="the operator logs at debug level (each reconcile's action and wait; with --logs)")
    parser.add_argument("--busy", type=int, default=0,
                        help="also run each run again with this many processes spinning on the CPU (paired: "
                             "quiet, then loaded), reported as rows '<N> +<busy> busy'")
    parser.add_argument("--floor", action="store_true",
                        help="before each apply, time N Deployments created with no operator (the API server's share)")
    args = parser.parse_args()
    os.environ["SHARDCDC_OPERATOR_RESYNC_SECONDS"] = str(args.resync)

    from cdcoperator.apply import KubeApi
    from cdcoperator.local.children import start_bound, stop_group
    from kubetest.fixtures import shared_control_plane
    from localkafka import KafkaBroker
    from vtgatesim import VTGateSim

    plane = shared_control_plane()
    plane.kubectl("apply", "-f", str(ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"), check=True)
    plane.wait_established("cdcconnectors.shardcdc.io")
    plane.ensure_namespace(NS)
    results: dict[str, Results] = {}
    with (VTGateSim() as sim, KafkaBroker() as broker, plane.api_client() as admin,
          tempfile.TemporaryDirectory() as scratch):
        kube = KubeApi(admin)
        tmp = args.logs or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for n in args.shards:
            sim.create_keyspace(f"ks{n}", n)
        nodes_log = Path(tmp) / "fakenodes.log"
        with nodes_log.open("wb") as log_out:
            nodes = start_bound(
                [sys.executable, "-m", "kubetest.fakenodes", "--namespace", NS, "--kubeconfig",
                 str(plane.kubeconfig_path)], stdout=log_out, stderr=subprocess.STDOUT)
        # The operator in a process of its own (``python -m cdcoperator``, as the chart runs it): in
        # this one, the probe's 20 ms polls and their JSON decoding held its interpreter lock.
        op_log = Path(tmp) / "operator.log"
        with op_log.open("wb") as log_out:
            liveness = f"http://127.0.0.1:{free_port()}/healthz"
            prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
            op = start_bound([sys.executable, *prof, "-m", "cdcoperator", "-n", NS, "--liveness", liveness, "--metrics-port", "0",
                              "--resync-seconds", str(args.resync), *(["--verbose"] if args.operator_debug else [])],
                             env={**os.environ, "KUBECONFIG": str(plane.kubeconfig_path)},
                             stdout=log_out, stderr=subprocess.STDOUT)
        probe = Probe(kube, args.timeout, args.probe_lists)
        try:
            probe.wait(lambda: answers(liveness), "the operator's liveness endpoint", time.monotonic())
            for n in args.shards:
                for run in range(args.runs):
                    for busy in (0, args.busy) if args.busy else (0,):
                        label = f"{n} +{busy} busy" if busy else str(n)
                        res = results.setdefault(label, Results())
                        with BusyLoad(busy):
                            if args.floor:
                                floor(probe, str(plane.kubeconfig_path), sim.address, broker.bootstrap, n, res)
                            res.loads.append(os.getloadavg()[0])
                            with RunQueue() as rq:
                                line = one_run(plane, probe, sim.address, broker.bootstrap, n, res,
                                               lambda: proc_cpu_seconds(op.pid))
                            res.runnable.append(rq.mean)
                        print(f"shards={label} run={run}: {line} (load {res.loads[-1]:.2f}, "
                              f"{res.runnable[-1]:.1f} runnable)", file=sys.stderr, flush=True)
            print(f"operator CPU-s in all: {proc_cpu_seconds(op.pid):.2f}", file=sys.stderr, flush=True)
        finally:
            stop_group(op, timeout=30)
            stop_group(nodes, timeout=30)
            if nodes.returncode not in (0, None):
                print(f"FakeNodes exited with {nodes.returncode}:\n{nodes_log.read_text()[-3000:]}", file=sys.stderr)
            if op.returncode not in (0, None, -15):
                print(f"the operator exited with {op.returncode}:\n{op_log.read_text()[-3000:]}", file=sys.stderr)
    print("\n| shards | " + " | ".join(FIGURES.values()) + " |")
    print("| ---: | " + " | ".join("---:" for _ in FIGURES) + " |")
    for n, res in results.items():
        print(res.row(n))
    print(f"\n1-minute load average at the start of each run; mean runnable processes during it ({os.cpu_count()} CPUs):")
    for n, res in results.items():
        print(f"  {n} shards: {', '.join(f'{a:.2f}; {b:.1f}' for a, b in zip(res.loads, res.runnable, strict=True))}")
    if args.json:
        doc = {n: {"figures": {k: [round(x, 2) for x in v] for k, v in res.figures.items() if v},
                   "load_at_start": [round(x, 2) for x in res.loads],
                   "runnable_during": [round(x, 2) for x in res.runnable]} for n, res in results.items()}
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "resync_s": args.resync, "shards": doc},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
