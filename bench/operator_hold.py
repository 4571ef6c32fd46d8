"""The operator's footprint while it holds many connectors: RSS and CPU of the operator process with
10 connectors of 256 shards each (2,560 tasks), against the real API server.

The operator runs as its own process (``python -m cdcoperator``, what the chart's Deployment runs),
so its RSS and CPU time are read from ``/proc/<pid>`` alone; FakeNodes (``kubetest.fakenodes``)
stands in for the Deployment controller and kubelet in another process and serves each task's
``/status``; shards come from the VTGate test server. Per connector count, the script applies the
connectors one after the other, waits until every one is Ready (``AllTasksStreaming``) and then
holds for ``--hold`` seconds: the figures are the operator's RSS at the end of the hold, its peak
RSS (``VmHWM``), and its CPU over the hold (CPU seconds per wall second: the steady cost of the
resync timer reading 2,560 status documents every ``--resync`` seconds, the chart's default 10 s).

    .venv/bin/python bench/operator_hold.py --connectors 10 --shards 256 --hold 60

The CPU time of the hold does not depend much on the machine's load (a loaded machine stretches
the wall time of each pass, not its CPU); the time to Ready does, and is printed with the load.
``--busy 2`` runs it all beside two processes spinning on the CPU (``operator_scale.BusyLoad``):
the same figures on a loaded machine, with the mean number of runnable processes as its load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from operator_scale import NS, BusyLoad, Probe, RunQueue, proc_cpu_seconds  # noqa: E402  (bench/ is not a package)


def proc_memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def connector(name: str, sim_address: str, bootstrap: str, keyspace: str, tasks: int) -> dict[str, object]:
    return {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": {"vitess": {"vtgate": sim_address, "vtctld": sim_address, "keyspace": keyspace}},
                     "kafka": {"bootstrapServers": bootstrap, "topicPrefix": name}, "tasks": tasks}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connectors", type=int, default=10)
    parser.add_argument("--shards", type=int, default=256)
    parser.add_argument("--hold", type=float, default=60.0)
    parser.add_argument("--resync", type=float, default=10.0, help="the operator's resync interval (chart: 10 s)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", default="", help="write the figures to this file")
    parser.add_argument("--busy", type=int, default=0,
                        help="this many processes spinning on the CPU throughout (the figures on a loaded machine)")
    args = parser.parse_args()

    from cdcoperator.apply import KubeApi
    from cdcoperator.local.children import start_bound, stop_group
    from kubetest.fixtures import shared_control_plane
    from localkafka import KafkaBroker
    from vtgatesim import VTGateSim

    plane = shared_control_plane()
    plane.kubectl("apply", "-f", str(ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"), check=True)
    plane.wait_established("cdcconnectors.shardcdc.io")
    plane.ensure_namespace(NS)
    with (VTGateSim() as sim, KafkaBroker() as broker, plane.api_client() as admin,
          tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack):
        sim.create_keyspace("hold", args.shards)
        kube = KubeApi(admin)
        env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig_path)}
        logs = {n: (Path(tmp) / f"{n}.log").open("wb") for n in ("fakenodes", "operator")}
        nodes = start_bound([sys.executable, "-m", "kubetest.fakenodes", "--namespace", NS, "--kubeconfig",
                             str(plane.kubeconfig_path)], stdout=logs["fakenodes"], stderr=subprocess.STDOUT)
        op = start_bound([sys.executable, "-m", "cdcoperator", "-n", NS, "--liveness", "", "--metrics-port", "0",
                          "--resync-seconds", str(args.resync)], env=env,
                         stdout=logs["operator"], stderr=subprocess.STDOUT)
        probe = Probe(kube, args.timeout)
        try:
            busy = stack.enter_context(BusyLoad(args.busy))
            rq = stack.enter_context(RunQueue())
            load0, t0 = os.getloadavg()[0], time.monotonic()
            names = [f"hold{i}" for i in range(args.connectors)]
            for name in names:
                body = connector(name, sim.address, broker.bootstrap, "hold", args.shards)
                plane.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(body), check=True)
            for name in names:
                probe.wait(lambda name=name: probe.ready(name, 0, args.shards), f"{name} Ready", t0)
            ready_s = time.monotonic() - t0
            cpu0, w0 = proc_cpu_seconds(op.pid), time.monotonic()
            time.sleep(args.hold)  # the measured window itself, not a synchronisation
            cpu = (proc_cpu_seconds(op.pid) - cpu0) / (time.monotonic() - w0)
            rss, hwm = proc_memory_mib(op.pid)
            load1 = os.getloadavg()[0]
            stack.close()  # the spinners stop, and the run queue's sampling with them
        finally:
            stop_group(op, timeout=30)
            stop_group(nodes, timeout=30)
            for f in logs.values():
                f.close()
    figures = {"connectors": args.connectors, "shards": args.shards, "tasks": args.connectors * args.shards,
               "resync_s": args.resync, "hold_s": args.hold, "ready_s": round(ready_s, 1),
               "rss_mib": round(rss, 1), "rss_peak_mib": round(hwm, 1),
               "cpu_per_s": round(cpu, 3), "load_start": round(load0, 2), "load_end": round(load1, 2),
               "busy_processes": busy.count, "runnable_mean": round(rq.mean, 2), "cpus": os.cpu_count()}
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
