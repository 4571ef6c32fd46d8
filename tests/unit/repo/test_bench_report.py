"""BENCHMARKS.md's summary table is generated from bench/results/*.json (``make bench-report``):
the committed page must be exactly what the generator writes, so the page and the data agree."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_benchmarks_page_is_the_generators_output() -> None:
    report = _report()
    page = (ROOT / "BENCHMARKS.md").read_text()
    assert report.render(page, report.load()) == page, "BENCHMARKS.md is stale: run `make bench-report`"
    assert report.main(["--check"]) == 0
    assert len(page.encode()) < 25_000, "BENCHMARKS.md is one page of current figures; history lives in git"


def test_every_result_has_the_fields_the_table_shows() -> None:
    report = _report()
    rows = report.load()
    assert rows, "no results in bench/results/"
    for r in rows:
        for field in ("what", "target", "figure", "unit", "statistic", "status", "command", "date", "context"):
            assert r.get(field) not in (None, ""), f"{r['file']}: {r.get('what')!r} has no {field}"
        interval = r.get("interval")
        if interval:
            assert interval["low"] <= r["figure"] <= interval["high"], f"{r['file']}: {r['what']} outside its interval"


def test_a_changed_result_changes_the_table_and_fails_the_check(tmp_path: Path) -> None:
    report = _report()
    for src in (ROOT / "bench" / "results").glob("*.json"):
        (tmp_path / src.name).write_text(src.read_text())
    doc = json.loads((tmp_path / "streaming_memory.json").read_text())
    doc["results"][0].update(figure=151, runs=[150, 151, 152], date="2026-12-01")
    (tmp_path / "streaming_memory.json").write_text(json.dumps(doc))
    page = (ROOT / "BENCHMARKS.md").read_text()
    changed = report.render(page, report.load(tmp_path))
    assert changed != page
    row = next(line for line in changed.splitlines() if "peak RSS" in line and line.startswith("|"))
    times, dash = report.TIMES, report.DASH
    assert f"**151 MB** (median of 6 runs, at-least-once {times}3 then exactly-once {times}3: 150 / 151 / 152)" in row
    assert f"not computed (runs span 150{dash}152)" in row and "2026-12-01" in row
    # Only the generated block changes: the hand-written method sections stay as they are.
    assert changed.split(report.END)[1] == page.split(report.END)[1]
    assert changed.split(report.BEGIN)[0] == page.split(report.BEGIN)[0]


def test_a_page_without_markers_is_refused_with_the_fix() -> None:
    report = _report()
    with pytest.raises(SystemExit, match="markers are missing"):
        report.render("# Benchmarks\n", report.load())


def test_numbers_are_written_as_the_page_writes_them() -> None:
    report = _report()
    assert report.number(98538) == "98,538"
    assert report.number(8.7) == "8.7"
    minus = "\N{MINUS SIGN}"
    assert report.number(-12.3) == f"{minus}12.3"
    assert report.number(7.1, signed=True) == "+7.1"
    assert report.interval_cell({"unit": "%", "interval": {"low": -4.1, "high": 16.1}}) == f"{minus}4.1 to +16.1 %"
