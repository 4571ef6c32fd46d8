"""The test suite's layout: every test file sits in its tier (scripts/test_tiers.py says where), none
directly in tests/, so a flat file added on a branch is caught and placed with one command."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from loading import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "test_tiers.py"


def _tiers() -> ModuleType:
    return load_script(SCRIPT, "test_tiers_script")


def test_no_test_file_sits_directly_in_tests() -> None:
    flat = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert flat == [], f"place them: python scripts/test_tiers.py {' '.join('tests/' + n for n in flat)}"


def test_every_test_file_is_where_the_rule_places_it() -> None:
    tiers = _tiers()
    assert tiers.misplaced() == []
    placed = list((ROOT / "tests").rglob("test_*.py"))
    assert {p.relative_to(ROOT / "tests").parts[0] for p in placed} == set(tiers.TIERS)


@pytest.mark.parametrize(("name", "source", "where"), [
    ("test_worker_x.py", "from cdcworker import keyrange\n\ndef test_a() -> None:\n    assert keyrange\n", "unit/worker"),
    ("test_worker_x.py", "def test_a(kafka_broker) -> None:\n    assert kafka_broker\n", "integration/worker"),
    ("test_thing.py", "from worker_fixtures import running_task\nfrom cdcoperator import planner\n",
     "integration/operator"),
    ("test_thing.py", "def test_a() -> None:\n    from vtgatesim import VTGateSim\n", "integration/devkit"),
    ("test_thing.py", "import subprocess\n\ndef test_a() -> None:\n    subprocess.Popen(['true'])\n", "integration/repo"),
    ("test_thing.py", "from shardcdc_cli import cli\nfrom connectstandalone import runner\n", "conformance/cli"),
    ("test_operator_e2e_more.py", "from cdcoperator import planner\n", "e2e/operator"),
    ("test_helm_more.py", "import yaml\n", "unit/repo"),
])
def test_the_rule_places_a_flat_file_by_what_it_uses(tmp_path: Path, name: str, source: str, where: str) -> None:
    path = tmp_path / name
    path.write_text(source)
    tiers = _tiers()
    assert tiers.place(path) == ROOT / "tests" / where / name


def test_a_moved_file_still_finds_the_repository_root() -> None:
    tiers = _tiers()
    text = 'ROOT = Path(__file__).resolve().parents[3]\nNATIVE = Path(__file__).resolve().parents[3] / "w"\n'
    assert tiers.rewrite_root(text, 3) == ('ROOT = Path(__file__).resolve().parents[3]\n'
                                           'NATIVE = Path(__file__).resolve().parents[3] / "w"\n')
