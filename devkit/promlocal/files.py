"""The shipped rules and scrape configuration, rendered for a Prometheus on this machine (pure)."""

from __future__ import annotations

import copy
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "deploy" / "prometheus" / "shardcdc-rules.yaml"
SCRAPE_FILE = ROOT / "deploy" / "prometheus" / "scrape-configs.yaml"
PROMETHEUS_VERSION = "2.42"  # keep in step with PROMETHEUS_VERSION in the Makefile


def binary(name: str) -> Path:
    """``prometheus`` or ``promtool``: $SHARDCDC_<NAME> or PATH; a clear error saying how to install it."""
    found = os.environ.get(f"SHARDCDC_{name.upper()}") or shutil.which(name)
    if not found or not os.access(found, os.X_OK):
        raise FileNotFoundError(f"{name} not found: run `make prometheus` (installs Debian's prometheus "
                                f"package, {PROMETHEUS_VERSION}) or set SHARDCDC_{name.upper()}")
    return Path(found)


def plain_rules(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A PrometheusRule's ``spec`` (``groups: [...]``): the rule-file format of Prometheus and promtool."""
    if doc.get("kind") != "PrometheusRule":
        raise ValueError(f"expected a PrometheusRule, got kind {doc.get('kind')!r}")
    return {"groups": copy.deepcopy(doc["spec"]["groups"])}


_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")


def shorten_for(rules: Mapping[str, Any], seconds: int) -> dict[str, Any]:
    """``rules`` with every non-zero ``for:`` set to ``seconds`` (only the wait changes, never an
    expression), so a live test sees an alert go pending and firing in seconds, not minutes."""
    out = copy.deepcopy(dict(rules))
    for group in out["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and rule.get("for"):
                if not _DURATION.match(str(rule["for"])):
                    raise ValueError(f"{rule['alert']}: unexpected for: {rule['for']!r}")
                rule["for"] = f"{seconds}s"
    return out


def local_scrape_config(scrape: Mapping[str, Any], targets: Mapping[str, Path], interval: str) -> list[dict[str, Any]]:
    """The copyable ``scrape_configs`` with each job's Kubernetes discovery replaced by the file
    ``targets[job_name]`` (a local-mode target file) and the interval set; relabelling untouched."""
    jobs = []
    for job in scrape["scrape_configs"]:
        job = copy.deepcopy(job)
        if "kubernetes_sd_configs" not in job:
            raise ValueError(f"job {job.get('job_name')!r}: expected kubernetes_sd_configs")
        del job["kubernetes_sd_configs"]
        job["file_sd_configs"] = [{"files": [str(targets[job["job_name"]])], "refresh_interval": interval}]
        job["scrape_interval"] = interval
        jobs.append(job)
    return jobs


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a YAML mapping")
    return doc
