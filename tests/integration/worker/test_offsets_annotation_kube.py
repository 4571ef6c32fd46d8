"""Day-2 offsets and status against a real kube-apiserver, the operator (kopf) and a real broker.

The operator runs under the chart-equivalent least-privilege identity (``operator/rbac.yaml``), as in
``test_operator_reconcile_kube``; ``FakeNodes`` plays the Deployment controller and kubelet. Offsets
are seeded with ``OffsetStore`` exactly as workers write them, and read back byte for byte.

Covered: the one-shot ``shardcdc.io/offsets`` annotation (list to a ConfigMap in any state; reset
and alter refused while running, carried out once stopped; removed after use; events), and the CLI's
cluster path (``shardcdc offsets`` refusing a running connector with exit code 3, ``shardcdc status``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_kube_fixtures import FakeNodes, env_var, operator_runner, wait_for
from polling import eventually

from cdcoperator.apply import KubeApi
from cdcworker.offsets import OffsetPartition, OffsetValue, Vgtid, offset_record_key
from cdcworker.offsets.edits import connect_document, entries
from cdcworker.offsets.store import OffsetStore
from kubetest import KubeControlPlane, kube_control_plane_fixture
from kubetest.controlplane import free_port
from localkafka import KafkaBroker
from shardcdc_cli import cli
from vtgatesim import VTGateSim

ROOT = Path(__file__).resolve().parents[3]
NS = "ops"
G1 = "MySQL56/aaaaaaaa-0000-0000-0000-000000000001:1-10"
G2 = "MySQL56/bbbbbbbb-0000-0000-0000-000000000002:1-20"
SYSTEM_NS = "ops-system"  # not shardcdc-system: other test modules create that one in this process
NAMESPACES = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {SYSTEM_NS}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
"""


def rbac() -> str:
    """The operator's least-privilege identity (operator/rbac.yaml), moved to this module's own names."""
    docs = list(yaml.safe_load_all((ROOT / "operator" / "rbac.yaml").read_text()))
    for doc in docs:
        meta = doc["metadata"]
        if meta.get("namespace") == "shardcdc-system":
            meta["namespace"] = SYSTEM_NS
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            meta["name"] += "-offsets-test"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += "-offsets-test"
            for subject in doc["subjects"]:
                subject["namespace"] = SYSTEM_NS
    return yaml.safe_dump_all(docs)


class Env:
    def __init__(self, plane: KubeControlPlane, sim: VTGateSim, kube: KubeApi, broker: KafkaBroker) -> None:
        self.plane, self.sim, self.kube, self.broker = plane, sim, kube, broker

    def kubectl(self, *args: str, input: str | None = None) -> str:
        r = self.plane.kubectl("-n", NS, *args, input=input)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def get(self, kind_path: str) -> dict[str, Any] | None:
        return self.kube.request("GET", kind_path, allow=(404,))

    def connector(self, name: str) -> dict[str, Any]:
        obj = self.get(f"/apis/shardcdc.io/v1alpha1/namespaces/{NS}/cdcconnectors/{name}")
        assert obj is not None
        return obj

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.connector(name)["metadata"].get("annotations") or {})

    def events(self, name: str) -> list[tuple[str, str, str]]:
        out = self.kube.request("GET", f"/api/v1/namespaces/{NS}/events",
                              query={"fieldSelector": f"involvedObject.name={name}"})
        items = sorted((out or {}).get("items") or [], key=lambda e: int(e["metadata"]["resourceVersion"]))
        return [(e["type"], e["reason"], e.get("message") or "") for e in items]

    def posted(self, name: str, event: tuple[str, str, str]) -> None:
        """Wait for ``event``: kopf posts Events from a background task, so one can reach the API
        server after the annotation's removal that ``annotate`` waited on."""

        def seen() -> None:
            assert event in self.events(name), self.events(name)

        eventually(seen, 20, f"the event {event[:2]}")

    def annotate(self, name: str, value: str) -> None:
        self.kubectl("annotate", "--overwrite", f"cdc/{name}", f"shardcdc.io/offsets={value}")
        wait_for(lambda: "shardcdc.io/offsets" not in self.annotations(name), 30, f"offsets={value} handled")

    def records(self, topic: str) -> dict[bytes, bytes]:
        with OffsetStore({"bootstrap.servers": self.broker.bootstrap}, topic) as store:
            return store.load()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kafka_broker: KafkaBroker) -> Iterator[Env]:
    with VTGateSim() as sim:
        for plane in kube_control_plane_fixture():
            plane.kubectl("apply", "-f", "-", input=NAMESPACES, check=True)
            plane.kubectl("apply", "-f", str(ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"), check=True)
            plane.kubectl("apply", "-f", "-", input=rbac(), check=True)
            plane.wait_established("cdcconnectors.shardcdc.io")
            token = plane.service_account_token(SYSTEM_NS, "shardcdc-operator")
            sa_config = plane.write_kubeconfig(tmp_path_factory.mktemp("sa") / "operator.kubeconfig",
                                               user="shardcdc-operator", token=token, namespace=NS)
            liveness = f"http://127.0.0.1:{free_port()}/healthz"
            with plane.api_client() as admin, FakeNodes(KubeApi(admin), NS) as nodes:
                with (
                    env_var("SHARDCDC_OPERATOR_RESYNC_SECONDS", "0.5"),
                    plane.kubeconfig_env(sa_config),
                    operator_runner(NS, liveness, timeout=30) as runner,
                ):
                    yield Env(plane, sim, KubeApi(admin), kafka_broker)
                assert nodes.errors == []
            assert runner.exception is None, runner.output[-3000:]
            # a refused call, not the digits 403 in a log line's milliseconds ("04:59:49,403")
            refused = re.search(r"Forbidden|(?<![\d,.:])403(?!\d)", runner.output)
            assert refused is None, runner.output[-3000:]


def _seed(env: Env, name: str, topic: str) -> dict[bytes, bytes]:
    with OffsetStore({"bootstrap.servers": env.broker.bootstrap}, topic, partitions=3, replication_factor=1) as s:
        s.ensure_topic()
        s.write(name, OffsetPartition.for_task(name, 0, 2, 0), OffsetValue.build(Vgtid.of("ks", {"-80": G1})))
        s.write(name, OffsetPartition.for_task(name, 1, 2, 0), OffsetValue.build(Vgtid.of("ks", {"80-": G1})))
        s.write("other", OffsetPartition("other"), OffsetValue.build(Vgtid.of("ks", {"-": G2})))
        return s.load()


def _cr(env: Env, name: str, topic: str) -> dict[str, Any]:
    return {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"source": {"vitess": {"vtgate": env.sim.address, "keyspace": "ks"}},
                 "kafka": {"bootstrapServers": env.broker.bootstrap, "topicPrefix": name, "offsetsTopic": topic},
                 "tasks": 2},
    }


def shardcdc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_offsets_annotation_and_cli_on_a_live_connector(env: Env, capsys: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    name, topic = "inv", f"offsets-{uuid.uuid4().hex[:8]}"
    seeded = _seed(env, name, topic)
    env.sim.create_keyspace("ks", ["-80", "80-"])
    env.kubectl("apply", "-f", "-", input=json.dumps(_cr(env, name, topic)))
    wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                         for c in (env.connector(name).get("status") or {}).get("conditions") or []), 30, "Ready")
    kube_args = ("-n", NS, "--kubeconfig", str(env.plane.kubeconfig_path))

    # list works in any state: the document lands in <name>-offsets.
    env.annotate(name, "list")
    cm = env.get(f"/api/v1/namespaces/{NS}/configmaps/{name}-offsets")
    assert cm is not None
    expected = connect_document(entries(seeded, name))
    assert json.loads(cm["data"]["offsets.json"]) == expected
    assert cm["data"]["result"] == f"listed 2 offset records of {name} from topic {topic}"
    owner = cm["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("CdcConnector", name, True)
    env.posted(name, ("Normal", "OffsetsListed", cm["data"]["result"]))

    # reset while running: refused by the operator and by the CLI (exit code 3); nothing written.
    env.annotate(name, "reset")

    def refused_once() -> None:
        assert [m for t, r, m in env.events(name) if r == "OffsetsRefused"] == [
            "shardcdc.io/offsets=reset: spec.state is 'running'; set it to 'stopped' first "
            "(kubectl patch cdc/<name> --type=merge -p '{\"spec\":{\"state\":\"stopped\"}}')"]

    eventually(refused_once, 20, "the OffsetsRefused event")
    rc, _, err = shardcdc(capsys, "offsets", "reset", name, *kube_args, "--yes")
    assert rc == 3 and f"refusing to change the offsets of {NS}/{name}: spec.state is 'running'" in err
    assert env.records(topic) == seeded

    # The CLI's cluster path reads bootstrap servers and topic from the resource.
    rc, out, _ = shardcdc(capsys, "offsets", "list", name, *kube_args, "--json")
    assert rc == 0 and json.loads(out) == expected
    rc, out, _ = shardcdc(capsys, "status", name, *kube_args)
    assert rc == 0, out
    assert f"{NS}/{name}" in out and "AllTasksStreaming" in out and "-80" in out and "80-" in out
    rc, out, _ = shardcdc(capsys, "status", name, *kube_args, "--json")
    assert rc == 0 and json.loads(out)["items"][0]["metadata"]["name"] == name

    # Stopped and every worker exited: alter from the edited ConfigMap, then reset.
    env.kubectl("patch", f"cdc/{name}", "--type=merge", "-p", '{"spec": {"state": "stopped"}}')
    wait_for(lambda: ((env.connector(name).get("status") or {}).get("assignment") or {}).items()
             >= {"phase": "Stopped", "stoppedCleanly": True}.items(), 30, "workers exited")
    edited = {"offsets": [{"partition": {"server": name, "task_key": "task1_2_0"},
                           "offset": {"vgtid": Vgtid.of("ks", {"80-": G2}).to_json()}}]}
    env.kubectl("patch", f"configmap/{name}-offsets", "--type=merge", "-p",
                json.dumps({"data": {"offsets.json": json.dumps(edited)}}))
    env.annotate(name, "alter")
    key = offset_record_key(name, OffsetPartition.for_task(name, 1, 2, 0))
    assert env.records(topic) == {**seeded, key: OffsetValue.build(Vgtid.of("ks", {"80-": G2})).to_bytes()}
    env.posted(name, ("Normal", "OffsetsAltered", f"wrote 1 offset records of {name} in topic {topic}"))

    # Hand-back to Debezium with 2 tasks (shardcdc's count, which Debezium refuses on shardcdc's own
    # generation): two new generations above the recorded one; nothing else changes.
    before = env.records(topic)
    gen = env.connector(name)["status"]["assignment"]["generation"]
    env.annotate(name, "handback:x")
    env.posted(name, ("Warning", "OffsetsRefused", "shardcdc.io/offsets=handback:x: 'x' is not a tasks.max; give "
                      "handback, handback:<tasks.max> or handback:no-per-task"))
    env.annotate(name, "handback")
    handed = {offset_record_key(name, OffsetPartition.for_task(name, i, n, g)): OffsetValue.build(Vgtid.of("ks", v))
              .to_bytes() for i, n, g, v in ((0, 1, gen + 1, {"-80": G1, "80-": G2}), (0, 2, gen + 2, {"-80": G1}),
                                              (1, 2, gen + 2, {"80-": G2}))}
    assert env.records(topic) == {**before, **handed}
    settings = (f"vitess.offset.storage.per.task=true, vitess.offset.storage.task.key.gen={gen + 2}, "
                "vitess.prev.num.tasks=1, tasks.max=2")
    message = f"wrote 3 offset records of {name} in topic {topic}; Debezium settings: topic.prefix={name}, {settings}"
    env.posted(name, ("Normal", "OffsetsHandedBack", message))
    cm = env.get(f"/api/v1/namespaces/{NS}/configmaps/{name}-offsets")
    assert cm is not None and cm["data"]["result"] == message
    assert cm["data"]["debezium.properties"] == f"name={name}\ntopic.prefix={name}\n" + settings.replace(", ", "\n") + "\n"

    env.annotate(name, "reset")
    other = offset_record_key("other", OffsetPartition("other"))
    assert env.records(topic) == {other: seeded[other]}
    cm = env.get(f"/api/v1/namespaces/{NS}/configmaps/{name}-offsets")
    assert cm is not None and json.loads(cm["data"]["offsets.json"]) == {"offsets": []}
    assert cm["data"]["result"] == f"deleted 5 offset records of {name} in topic {topic}"
    # The generation record goes with the offsets: a restart begins again at generation 0 rather than
    # looking for the previous generation's deleted keys.
    assert "assignment" not in (env.connector(name).get("status") or {})
    # (cdcoperator.offsets is not imported here: importing it registers its kopf handlers twice.)

    def record_cleared() -> None:
        events = env.events(name)
        assert any(e[:2] == ("Normal", "GenerationRecordCleared") and "generation 0" in e[2] for e in events), events

    eventually(record_cleared, 20, "the GenerationRecordCleared event")

    # The CLI now agrees to act (nothing left to change) and an unknown action is reported.
    rc, out, _ = shardcdc(capsys, "offsets", "reset", name, *kube_args, "--yes")
    assert rc == 0 and "nothing to change" in out
    env.annotate(name, "rewind")
    env.posted(name, ("Warning", "OffsetsRefused", "shardcdc.io/offsets=rewind: shardcdc.io/offsets='rewind' is not "
                      "one of list, reset, alter, handback"))
