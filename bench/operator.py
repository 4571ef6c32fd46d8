"""Operator benchmark: ``kubectl apply`` of a CdcConnector to every task Deployment created, and
``kubectl scale`` to the next generation's Deployments, against the real API server.

The operator (kopf, ``cdcoperator.handlers``) runs in-process with ``KopfRunner`` against the
kubetest control plane (real etcd + kube-apiserver, ``make kube``); shards come from the VTGate
test server (vtctld ``FindAllShardsInKeyspace``), which answers at once. No kubelet runs, so no
pod ever starts: a drained generation's workers count as exited as soon as their Deployments are
scaled to zero, and the scale figure is the operator's own path (drain, re-plan, create).

    .venv/bin/python bench/operator.py --shards 1 16 256 --runs 3

For each shard count N: apply with ``tasks: N`` (N Deployments + N ConfigMaps of generation 0),
then ``kubectl scale --replicas=N/2`` (generation 1: N/2 Deployments; skipped for N=1, where the
task count cannot change). The connector is deleted between runs. The drain needs a second
reconcile after the workers stopped, which the level-based timer provides: the resync interval
(``--resync``, default 1 s; the chart's default is 10 s) bounds that part of the scale time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--resync", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    os.environ["SHARDCDC_OPERATOR_RESYNC_SECONDS"] = str(args.resync)

    from kopf.testing import KopfRunner

    from cdcoperator.apply import KubeApi
    from kubetest.fixtures import shared_control_plane
    from vtgatesim import VTGateSim

    plane = shared_control_plane()
    plane.kubectl("apply", "-f", str(ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"), check=True)
    plane.kubectl("wait", "--for=condition=Established", "crd/cdcconnectors.shardcdc.io", "--timeout=60s",
                  check=True)
    ns = "bench"
    plane.kubectl("create", "namespace", ns)
    results: dict[int, dict[str, list[float]]] = {}
    with VTGateSim() as sim, plane.api_client() as admin, tempfile.TemporaryDirectory() as tmp:
        kube = KubeApi(admin)
        for n in args.shards:
            sim.create_keyspace(f"ks{n}", n)

        def deployments(name: str, gen: int) -> int:
            out = kube._call("GET", f"/apis/apps/v1/namespaces/{ns}/deployments",
                             query={"labelSelector": f"shardcdc.io/connector={name},shardcdc.io/generation={gen}"})
            return len((out or {}).get("items") or [])

        def wait(pred: Any, what: str) -> None:
            deadline = time.monotonic() + args.timeout
            while not pred():
                if time.monotonic() > deadline:
                    raise SystemExit(f"timed out: {what}")
                time.sleep(0.02)  # polling the API: the measurement's resolution

        log = Path(tmp) / "operator.log"
        with (plane.kubeconfig_env(),
              KopfRunner(["run", "--standalone", "-n", ns, "-m", "cdcoperator.handlers"], timeout=60) as runner):
            for n in args.shards:
                res = results.setdefault(n, {"apply": [], "scale": []})
                for run in range(args.runs):
                    name = f"c{n}r{run}"
                    body = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {"source": {"vitess": {"vtgate": sim.address, "vtctld": sim.address,
                                                           "keyspace": f"ks{n}"}},
                                     "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": name},
                                     "tasks": n}}
                    t0 = time.monotonic()
                    plane.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(body), check=True)
                    wait(lambda name=name, n=n: deployments(name, 0) == n, f"{n} deployments of {name}")
                    res["apply"].append(time.monotonic() - t0)
                    if n > 1:
                        t0 = time.monotonic()
                        plane.kubectl("-n", ns, "scale", f"cdc/{name}", f"--replicas={n // 2}", check=True)
                        wait(lambda name=name, n=n: deployments(name, 1) == n // 2, f"generation 1 of {name}")
                        res["scale"].append(time.monotonic() - t0)
                    plane.kubectl("-n", ns, "delete", "cdc", name, "--wait=true", "--timeout=300s", check=True)
                    print(f"shards={n} run={run}: apply {res['apply'][-1]:.2f}s"
                          + (f", scale {res['scale'][-1]:.2f}s" if res["scale"] else ""), file=sys.stderr, flush=True)
        log.write_text(runner.output)
        if runner.exception is not None:
            raise runner.exception
    print("\nshards | apply -> all Deployments (median, runs) | scale -> next generation's Deployments")
    for n, res in results.items():
        apply_m = statistics.median(res["apply"])
        scale = f"{statistics.median(res['scale']):.2f} s" if res["scale"] else "n/a"
        print(f"{n:>6} | {apply_m:.2f} s ({', '.join(f'{x:.2f}' for x in res['apply'])}) | {scale}"
              + (f" ({', '.join(f'{x:.2f}' for x in res['scale'])})" if res["scale"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
