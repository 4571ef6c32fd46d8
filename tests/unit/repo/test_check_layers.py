"""The layer checker (scripts/check_layers.py, run by `make lint`): today's tree passes with its
listed exceptions, and a new violation of any contract fails with the file, line and import."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from loading import load_script

ROOT = Path(__file__).resolve().parents[3]
CHECKER = ROOT / "scripts" / "check_layers.py"
CONTRACTS = ROOT / "scripts" / "layers.toml"


def _checker() -> ModuleType:
    return load_script(CHECKER, "check_layers")


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The checker's command line, run in this process (the unit tier starts no processes)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _checker().main([str(a) for a in args])
    return subprocess.CompletedProcess(["check_layers.py", *map(str, args)], code, out.getvalue(), err.getvalue())


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages' source (only .py files), to add violations to."""
    for directory in ("cli/shardcdc_cli", "worker/cdcworker", "operator/cdcoperator", "devkit"):
        shutil.copytree(ROOT / directory, tmp_path / directory, ignore=lambda d, names: [
            n for n in names if not n.endswith(".py") and not (Path(d) / n).is_dir()])
    return tmp_path


def test_todays_tree_passes_with_no_exceptions_left() -> None:
    proc = _run("--summary")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == len(tomllib.loads(CONTRACTS.read_text())["contract"]) == 5
    assert all(line.endswith(": 0 excepted imports (0 module pairs), 0 failures") for line in lines), lines
    assert all(not c.get("exceptions") for c in tomllib.loads(CONTRACTS.read_text())["contract"])


@pytest.mark.parametrize(("path", "source", "contract"), [
    # an import inside a function counts as much as one at the top of a module
    ("worker/cdcworker/stray.py", "def f():\n    import kopf\n", "the worker imports no CLI, operator, devkit or kopf code"),
    ("worker/cdcworker/stray.py", "from cdcoperator import planner\n", "the worker imports no CLI, operator"),
    ("worker/cdcworker/stray.py", "from shardcdc_cli import cli\n", "the worker imports no CLI, operator"),
    ("operator/cdcoperator/stray.py", "def f():\n    from shardcdc_cli.offsets import register\n",
     "the operator imports no CLI code"),
    ("operator/cdcoperator/stray.py", "def f():\n    from localkafka.broker import KafkaBroker\n",
     "product code (shardcdc_cli, cdcoperator, cdcworker) never imports devkit"),
    ("cli/shardcdc_cli/stray.py", "import cdcdemo.demo\n", "product code (shardcdc_cli, cdcoperator, cdcworker) never"),
    ("cli/shardcdc_cli/stray.py", "def f():\n    from vtgatesim import VTGateSim\n", "product code (shardcdc_cli"),
    ("devkit/vtgatesim/stray.py", "import cdcoperator.model\n", "the VTGate test server imports no product code"),
    ("devkit/vtgatesim/stray.py", "from cdcworker import keyrange\n", "the VTGate test server imports no product code"),
])
def test_a_new_violation_fails_naming_file_line_and_import(tree: Path, path: str, source: str, contract: str) -> None:
    target = tree / path
    target.write_text((target.read_text() if target.exists() else "") + source)
    proc = _run("--root", tree)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if contract in line]
    assert lines, proc.stderr
    assert f"{path}:" in lines[0], lines


def test_an_import_that_closes_a_cycle_fails(tree: Path) -> None:
    # connectstandalone imports localkafka today; localkafka importing it back closes a cycle that
    # no forbidden-import contract covers.
    (tree / "devkit/localkafka/stray.py").write_text("def f():\n    import connectstandalone\n")
    proc = _run("--root", tree)
    assert proc.returncode == 1
    assert "import cycle between packages connectstandalone <-> localkafka" in proc.stderr
    assert "devkit/localkafka/stray.py:2: localkafka.stray -> connectstandalone" in proc.stderr


def _with_exception(tmp_path: Path, pair: str, why: str) -> Path:
    """A copy of layers.toml whose VTGate test server contract lists one exception."""
    contracts = tmp_path / "layers.toml"
    text = CONTRACTS.read_text()
    marker = 'forbidden = ["shardcdc_cli", "cdcworker", "cdcoperator"]\n'
    assert marker in text
    contracts.write_text(text.replace(marker, marker + f'exceptions = [{{ import = "{pair}", why = "{why}" }}]\n', 1)
                         .replace("# defines (vtgatesim/keyrange.py), so a mistake in the worker's copy is not mirrored "
                                  "by the server.\nexceptions = []\n", "", 1))
    return contracts


def test_an_import_that_closes_the_kubetest_localkafka_cycle_fails(tree: Path) -> None:
    # localkafka takes its TLS helper from kubetest; kubetest starting brokers through localkafka
    # again would close the cycle issue 26 broke (process supervision now lives in the product).
    (tree / "devkit/kubetest/stray.py").write_text("from localkafka import KafkaBroker\n")
    proc = _run("--root", tree)
    assert proc.returncode == 1
    assert "import cycle between packages kubetest <-> localkafka" in proc.stderr
    assert "devkit/kubetest/stray.py:1: kubetest.stray -> localkafka" in proc.stderr


def test_an_exception_that_no_longer_occurs_fails_so_the_list_shrinks(tmp_path: Path) -> None:
    contracts = _with_exception(tmp_path, "vtgatesim.topology -> cdcworker.keyrange", "a stale reason")
    assert tomllib.loads(contracts.read_text())["contract"][3]["exceptions"]
    proc = _run("--contracts", contracts)
    assert proc.returncode == 1
    assert "exception 'vtgatesim.topology -> cdcworker.keyrange' no longer occurs: remove it from layers.toml" \
        in proc.stderr


def test_a_listed_exception_lets_only_that_import_pass(tree: Path, tmp_path: Path) -> None:
    (tree / "devkit/vtgatesim/stray.py").write_text("from cdcworker import keyrange\nimport cdcoperator\n")
    proc = _run("--root", tree, "--contracts", _with_exception(tmp_path, "vtgatesim.stray -> cdcworker.keyrange", "x"))
    assert proc.returncode == 1
    assert "cdcworker.keyrange" not in proc.stderr
    assert "devkit/vtgatesim/stray.py:2: vtgatesim.stray -> cdcoperator" in proc.stderr


def test_an_exception_without_a_reason_is_refused(tmp_path: Path) -> None:
    proc = _run("--contracts", _with_exception(tmp_path, "vtgatesim.filters -> cdcworker.keyrange", ""))
    assert proc.returncode == 1
    assert "exception 'vtgatesim.filters -> cdcworker.keyrange' has no `why`" in proc.stderr


def test_relative_imports_and_from_imports_name_the_module(tmp_path: Path) -> None:
    checker = _checker()
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("from ..other import thing\nfrom pkg import sub\n")
    (pkg / "other.py").write_text("")
    pairs = sorted(i.pair for i in checker.scan({"pkg": "pkg"}, tmp_path))
    assert pairs == ["pkg.sub -> pkg.sub.leaf", "pkg.sub.leaf -> pkg.other", "pkg.sub.leaf -> pkg.sub"]


def test_cycles_are_found_through_several_packages() -> None:
    checker = _checker()
    imp = checker.Import
    imports = [imp("a.x", "b.y", "a/x.py", 1), imp("b.y", "c", "b/y.py", 1), imp("c.z", "a", "c/z.py", 3),
               imp("d", "a.x", "d.py", 1)]
    assert checker.cycles(imports, {"a", "b", "c", "d"}) == [["a", "b", "c"]]
    assert checker.cycles(imports[:2], {"a", "b", "c", "d"}) == []


def test_a_package_pyproject_installs_must_be_placed_in_a_layer(tmp_path: Path) -> None:
    """A new devkit package would otherwise import product code (or be imported by it) unchecked."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { cdcworker = "worker/cdcworker", newkit = "devkit/newkit", '
        'vitessapi = "build/gen/vitessapi" }\n')
    checker = _checker()
    assert checker.unlisted({"cdcworker": "worker/cdcworker"}, tmp_path, ["vitessapi"]) == ["newkit"]
    assert checker.unlisted({"cdcworker": "worker/cdcworker", "newkit": "devkit/newkit"}, tmp_path, ["vitessapi"]) == []
    contracts = tomllib.loads(CONTRACTS.read_text())
    assert checker.unlisted(contracts["packages"], ROOT, contracts["generated"]) == []  # today's tree
