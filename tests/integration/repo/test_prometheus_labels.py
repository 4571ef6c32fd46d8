"""The labels the alerts and the dashboard select are the ones the scrape configurations give.

Both ways of scraping are checked against the pods they must find: the chart's PodMonitor and
ServiceMonitor (rendered by helm), and the copyable ``deploy/prometheus/scrape-configs.yaml``, whose
relabelling is applied here to the Kubernetes discovery labels of a real worker pod template
(``cdcoperator.objects``) and of the chart's operator pod template. The live proof is
tests/integration/repo/test_prometheus_live.py; this one covers the Kubernetes side it cannot run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from helm_fixtures import by_kind, render
from test_operator_objects import BODY, TASK

from cdcoperator.local.prometheus import pod_targets
from cdcoperator.model import ConnectorResource
from cdcoperator.objects import build_config_map, build_deployment
from promlocal import RULES_FILE, SCRAPE_FILE, plain_rules
from promlocal.files import load

DASHBOARD = RULES_FILE.parents[1] / "grafana" / "shardcdc-dashboard.json"
MONITORS = {"metrics": {"podMonitor": {"create": True}, "serviceMonitor": {"create": True}}}
# What a worker series can be selected by: its target's labels and the worker's own metric labels.
TARGET_LABELS = {"namespace", "pod", "connector", "generation", "task"}
METRIC_LABELS = {"shard", "state", "code", "le", "type", "backfill", "phase"}


def relabel(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's relabelling (keep and replace with the default regex), enough for these jobs."""
    out = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(out.get(s, "") for s in rule["source_labels"])
        regex = rule.get("regex", "(.*)")
        action = rule.get("action", "replace")
        if action == "keep":
            if not re.fullmatch(regex, value):
                return None
        elif action == "replace":
            m = re.fullmatch(regex, value)
            if m:
                out[rule["target_label"]] = m.expand(rule.get("replacement", "$1").replace("$1", r"\1"))
        else:
            raise AssertionError(f"relabel action {action} not modelled")
    return {k: v for k, v in out.items() if not k.startswith("__")}


def discovered(template: dict[str, Any], namespace: str) -> list[dict[str, str]]:
    """Kubernetes discovery labels (role pod) of a pod made from ``template``."""
    pod = {"metadata": {"namespace": namespace, "name": "pod-x", "labels": template["metadata"]["labels"]},
           "status": {"podIP": "10.0.0.9", "conditions": []}, "spec": template["spec"]}
    return [g["labels"] for g in pod_targets([pod])]


def worker_template() -> dict[str, Any]:
    cr = ConnectorResource.from_body(BODY)
    deployment = build_deployment(cr, TASK, build_config_map(cr, TASK.generation))
    return dict(deployment["spec"]["template"])


def scrape_job(name: str) -> dict[str, Any]:
    return next(j for j in load(SCRAPE_FILE)["scrape_configs"] if j["job_name"] == name)


def test_copyable_worker_job_keeps_the_worker_metrics_port_with_its_labels() -> None:
    job = scrape_job("shardcdc-workers")
    kept = [t for t in (relabel(job["relabel_configs"], lv) for lv in discovered(worker_template(), "shop")) if t]
    assert kept == [{"namespace": "shop", "pod": "pod-x", "connector": "orders", "generation": "4", "task": "1"}]
    assert set(kept[0]) == TARGET_LABELS


def test_copyable_operator_job_keeps_the_charts_operator_pod_with_honor_labels(tmp_path: Path) -> None:
    (deployment,) = by_kind(render({}, tmp_path), "Deployment")
    job = scrape_job("shardcdc-operator")
    assert job["honor_labels"] is True
    template = deployment["spec"]["template"]
    kept = [t for t in (relabel(job["relabel_configs"], lv) for lv in discovered(template, "shardcdc-system")) if t]
    assert kept == [{"pod": "pod-x"}]  # the metrics port only (not the health port); no namespace label to clash
    assert discovered(worker_template(), "shop") and all(
        relabel(job["relabel_configs"], lv) is None for lv in discovered(worker_template(), "shop"))


def test_chart_monitors_select_the_pods_and_give_the_same_labels(tmp_path: Path) -> None:
    objs = render(MONITORS, tmp_path)
    (pm,) = by_kind(objs, "PodMonitor")
    template = worker_template()
    assert pm["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    # PodMonitor targets get namespace and pod from the operator; the relabelings add the rest,
    # exactly as the copyable job does.
    chart = {(tuple(r["sourceLabels"]), r["targetLabel"]) for r in endpoint["relabelings"]}
    copyable = {(tuple(r["source_labels"]), r["target_label"]) for r in scrape_job("shardcdc-workers")["relabel_configs"]
                if r.get("action", "replace") == "replace" and r["target_label"] not in ("namespace", "pod")}
    assert chart == copyable
    # what the alerts group by and `up{connector!=""}` (a worker target) relies on
    assert {"connector", "task"} <= {target for _, target in chart}
    # The operator: Service -> pod, ServiceMonitor -> Service, honorLabels for the namespace label.
    (dep,) = by_kind(objs, "Deployment")
    # the operator's metrics Service (the chart also has the admission webhook's)
    (svc,) = [s for s in by_kind(objs, "Service") if "metrics" in {p.get("name") for p in s["spec"]["ports"]}]
    (sm,) = by_kind(objs, "ServiceMonitor")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    ports = {p["name"] for c in dep["spec"]["template"]["spec"]["containers"] for p in c.get("ports") or ()}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports
    (sm_endpoint,) = sm["spec"]["endpoints"]
    assert sm_endpoint["honorLabels"] is True


def _grouping_and_matcher_labels(expr: str) -> set[str]:
    names = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        names.update(n.strip() for n in group.split(",") if n.strip())
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        names.update(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    return names


def test_rules_and_dashboard_select_only_labels_the_series_have() -> None:
    rules = plain_rules(load(RULES_FILE))
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    texts = [json.dumps(r.get("annotations")) for g in rules["groups"] for r in g["rules"]]
    dash = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    texts += [t.get("legendFormat", "") for p in dash["panels"] for t in p.get("targets", [])]
    used = set().union(*map(_grouping_and_matcher_labels, exprs))
    used |= {m for t in texts for pair in re.findall(r"\$labels\.(\w+)|\{\{\s*(\w+)\s*\}\}", t) for m in pair if m}
    assert used - TARGET_LABELS - METRIC_LABELS == set()
    assert {"namespace", "connector", "task"} <= used
