"""docs/badinput.md's matrix names real tests: at least 40 bad inputs, and a test for each of the
twelve cases of issue 28. Each node id is collected by pytest, so a renamed or removed test (or a
changed parameter id) fails here instead of leaving the tally pointing at nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "badinput.md"
NODE = re.compile(r"`(tests/[\w/]+\.py::[^`]+)`")


def _section(title: str) -> list[str]:
    text = DOC.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return [ln for ln in text[start:end if end > 0 else None].splitlines() if ln.startswith("| ") and "---" not in ln][1:]


def _collected(files: set[str]) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *sorted(files)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    return {ln.strip() for ln in out.stdout.splitlines() if "::" in ln}


def test_the_matrix_and_the_twelve_cases_name_tests_that_exist() -> None:
    matrix = _section("The matrix")
    cases = _section("The twelve cases of issue 28")
    assert len(matrix) >= 40
    assert [int(row.split("|")[1]) for row in matrix] == list(range(1, len(matrix) + 1))
    assert [int(row.split("|")[1]) for row in cases] == list(range(1, 13))
    named = [NODE.findall(row) for row in (*matrix, *cases)]
    assert all(named), [row for row, ids in zip((*matrix, *cases), named, strict=True) if not ids]
    ids = {i for group in named for i in group}
    assert len({NODE.findall(row)[0] for row in matrix}) == len(matrix), "each bad input its own test"
    collected = _collected({i.split("::")[0] for i in ids})
    assert sorted(ids - collected) == []
