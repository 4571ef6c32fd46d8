"""The alert rules checked and unit-tested by promtool (Debian's prometheus package, ``make prometheus``).

``deploy/prometheus/shardcdc-rules.yaml`` is a PrometheusRule; its ``spec`` is the rule file that
Prometheus and promtool read (``promlocal.plain_rules``). ``promtool check rules`` validates it, and
``promtool test rules`` runs ``deploy/prometheus/tests/*.test.yaml``: for every alert, a series
history in which it fires (labels and annotations as an operator reads them) and one in which it
stays silent. Mutated copies of the rules (the mistakes the file had) must fail those tests, so
the tests are shown able to fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from promlocal import RULES_FILE, SCRAPE_FILE, binary, local_scrape_config, plain_rules
from promlocal.files import load

TESTS_DIR = RULES_FILE.parent / "tests"
TEST_FILES = sorted(TESTS_DIR.glob("*.test.yaml"))
RENDERED = "shardcdc-rules.rules.yaml"  # the name every test file's rule_files gives


def alerts(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary("promtool")), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def run_unit_tests(rules: dict[str, Any], workdir: Path) -> subprocess.CompletedProcess[str]:
    """promtool test rules over every test file, against ``rules`` written where they expect it."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / RENDERED).write_text(yaml.safe_dump(rules, sort_keys=False))
    for f in TEST_FILES:
        shutil.copy(f, workdir / f.name)
    return promtool("test", "rules", *(f.name for f in TEST_FILES), cwd=workdir)


def test_promtool_is_the_pinned_version() -> None:
    out = subprocess.run([str(binary("promtool")), "--version"], capture_output=True, text=True, check=True)
    assert "version 2.42." in out.stdout + out.stderr


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    rules = plain_rules(load(RULES_FILE))
    (tmp_path / RENDERED).write_text(yaml.safe_dump(rules, sort_keys=False))
    r = promtool("check", "rules", RENDERED, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in rules['groups'])} rules found" in r.stdout


def test_every_alert_has_a_firing_and_a_silent_test() -> None:
    names = set(alerts(plain_rules(load(RULES_FILE))))
    fires: set[str] = set()
    silent: set[str] = set()
    for f in TEST_FILES:
        doc = load(f)
        assert doc["rule_files"] == [RENDERED], f
        for case in doc["tests"]:
            for t in case.get("alert_rule_test") or ():
                (fires if t.get("exp_alerts") else silent).add(t["alertname"])
                for exp in t.get("exp_alerts") or ():
                    # what an operator reads: the severity and both annotations, checked exactly
                    assert "severity" in exp["exp_labels"] and set(exp["exp_annotations"]) == {"summary", "description"}
    assert names - fires == set(), "alerts without a test in which they fire"
    assert names - silent == set(), "alerts without a test in which they stay silent"
    assert (fires | silent) - names == set(), "tests of alerts the rules do not have"


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    r = run_unit_tests(plain_rules(load(RULES_FILE)), tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(TEST_FILES), r.stdout


# The mistakes the rules had, each of which the unit tests must catch.
MUTATIONS = {
    # $value in milliseconds read as seconds by humanizeDuration ("4d 15h ..." for 400 s)
    "lag in ms": ("ShardcdcLagHigh", "expr",
                  "max by (namespace, connector, shard) (shardcdc_milliseconds_behind_source) > 300000"),
    # a crashed worker exports nothing: not-ready alone never sees it; connected==0 fires on completed tasks
    "stream stopped without up": ("ShardcdcStreamStopped", "expr", "(shardcdc_ready == 0) or (shardcdc_connected == 0)"),
    # the liveness probe restarts the worker long before the age reaches 120 s for 2 minutes
    "stall that never lasts": ("ShardcdcLoopStalled", "expr", "shardcdc_loop_heartbeat_age_seconds > 120"),
    # the worker's failed state alone vanishes when it exits
    "failed from the worker only": ("ShardcdcTaskFailed", "expr", 'shardcdc_state{state="failed"} == 1'),
    "errors without the for": ("ShardcdcStreamErrors", "for", "0m"),
    "not ready ignoring spec.state": ("ShardcdcConnectorNotReady", "expr", "shardcdc_operator_connector_ready == 0"),
    "degraded too soon": ("ShardcdcConnectorDegraded", "for", "1m"),
    "watermark threshold": ("ShardcdcLowWatermarkStale", "expr",
                            "max by (namespace, connector, task) (shardcdc_low_watermark_lag_seconds) > 90"),
    "backfill any phase": ("ShardcdcBackfillFailed", "expr", "shardcdc_operator_backfill_phase == 1"),
}


def test_mutations_cover_every_alert() -> None:
    assert {alert for alert, _, _ in MUTATIONS.values()} == set(alerts(plain_rules(load(RULES_FILE))))


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_unit_tests_catch_a_wrong_rule(name: str, tmp_path: Path) -> None:
    alert, key, value = MUTATIONS[name]
    rules = plain_rules(load(RULES_FILE))
    alerts(rules)[alert][key] = value
    r = run_unit_tests(rules, tmp_path)
    assert r.returncode != 0, f"promtool test rules passed with {alert}.{key} = {value!r}:\n{r.stdout}"
    assert f"alertname: {alert}" in r.stdout + r.stderr, r.stdout + r.stderr


def test_local_rendering_of_the_scrape_config_passes_promtool(tmp_path: Path) -> None:
    targets = {"shardcdc-workers": tmp_path / "workers.json", "shardcdc-operator": tmp_path / "operator.json"}
    for path in targets.values():
        path.write_text("[]")
    jobs = local_scrape_config(load(SCRAPE_FILE), targets, "5s")
    assert {j["job_name"] for j in jobs} == set(targets)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": jobs}))
    r = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
