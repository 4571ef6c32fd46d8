"""Place test files in their tier and package folder: ``tests/<tier>/<package>/test_*.py``.

Tiers (docs/architecture.md, "Tests"):

* ``unit``: no processes or servers (no broker, API server, test server, Vitess); the whole tier
  runs in under a minute (``make test-unit``);
* ``integration``: a real broker, kube-apiserver, the VTGate test server, real Vitess, Spark,
  Prometheus, or worker processes;
* ``conformance``: against real Debezium (Kafka Connect standalone);
* ``e2e``: the whole product from the outside (``shardcdc demo``, the operator end to end, kind).

The rule, read from each file's syntax (imports anywhere in the file, test-function arguments,
names used), first match wins:

1. imports ``connectstandalone``                                      -> conformance
2. the file name has ``e2e`` or starts with ``test_demo``              -> e2e
3. imports a devkit server package or a fixture module that starts one (``SERVER_MODULES``),
   uses a process fixture (``PROCESS_FIXTURES``), names ``VTGateSim`` or starts a process
   (``start_bound``, ``Popen``)                                        -> integration
4. otherwise                                                           -> unit

``OVERRIDES`` pins the few files the rule cannot judge (each with a reason). The package folder is
the package the file name names (``PREFIXES``: ``test_operator_*`` -> operator, ``test_vtgatesim_*``
-> devkit, ...), else the highest layer the file imports: ``cli`` (shardcdc_cli), ``operator``
(cdcoperator), ``worker`` (cdcworker), ``devkit`` (only devkit packages), else ``repo`` (charts,
images, docs, scripts, the build).

    python scripts/test_tiers.py              # move every flat tests/test_*.py (git mv when tracked)
    python scripts/test_tiers.py --dry-run    # print the moves only
    python scripts/test_tiers.py --check      # exit 1 if a test file is flat or not where the rule puts it

Moved files get their ``Path(__file__)`` repository-root arithmetic rewritten for the new depth.
Fixture modules (``tests/*_fixtures.py``, ``tests/polling.py``, ...) stay in ``tests/``: pytest puts
that folder on ``sys.path`` (pyproject's ``pythonpath``), so ``from polling import wait_for`` works
from every tier.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
TIERS = ("unit", "integration", "conformance", "e2e")

SERVER_MODULES = frozenset({
    # devkit packages that run servers or processes
    "localkafka", "kubetest", "realvitess", "sparkcluster", "promlocal", "cdcdemo",
    # fixture modules (tests/) whose helpers start a broker, a test server, workers or an API server
    "worker_fixtures", "vtgatesim_fixtures", "operator_kube_fixtures", "local_mode_fixtures",
    "handoff_fixtures", "backfill_fixtures", "realvitess_fixtures", "kafka_security_fixtures",
    "operator_kubelet", "operator_local_fixtures", "observability_fixtures",
})
PROCESS_FIXTURES = frozenset({
    "kafka_broker", "secure_kafka_broker", "fresh_kafka_broker", "real_vitess", "kube_control_plane",
    "sim_fixture", "stub_fixture", "sim", "stub",
})
PROCESS_NAMES = frozenset({"VTGateSim", "start_bound", "Popen", "KafkaBroker", "KubeControlPlane"})

# file name -> (tier, reason): what the syntax rule cannot see.
OVERRIDES: dict[str, tuple[str, str]] = {
    "test_fuzz_native.py": ("integration", "builds and runs the libFuzzer harness (about 45 s of processes)"),
    "test_bad_manifests.py": ("integration", "runs `shardcdc run` as a process for every bad manifest"),
}

# file-name prefix -> package folder (the longest match wins)
PREFIXES: tuple[tuple[str, str], ...] = (
    ("test_cli_", "cli"), ("test_bad_", "cli"),
    ("test_operator_", "operator"), ("test_local_mode", "operator"), ("test_backfill_operator", "operator"),
    ("test_crd_", "operator"), ("test_argocd_", "operator"), ("test_helm_", "repo"),
    ("test_worker_", "worker"), ("test_events_", "worker"), ("test_offsets_", "worker"), ("test_txmeta_", "worker"),
    ("test_records_", "worker"), ("test_backfill_", "worker"), ("test_observability_", "worker"),
    ("test_signal", "worker"), ("test_keyrange", "worker"), ("test_allocator", "worker"), ("test_kafka_", "worker"),
    ("test_vtgatesim_", "devkit"), ("test_kubetest_", "devkit"), ("test_kube_apiserver", "devkit"),
    ("test_kafka_broker", "devkit"), ("test_children", "operator"), ("test_realvitess_", "worker"),
    ("test_prometheus_", "repo"), ("test_dashboards", "repo"), ("test_bench_", "repo"), ("test_dockerfiles", "repo"),
    ("test_dockerd_", "repo"), ("test_packaging", "repo"), ("test_setup_steps", "repo"), ("test_check_layers", "repo"),
    ("test_test_tiers", "repo"), ("test_docs_", "repo"), ("test_vitess_patch", "repo"), ("test_proto_", "repo"),
    ("test_fuzz_", "worker"), ("test_rdkafka_", "worker"), ("test_conformance_", "worker"),
    ("test_demo", "devkit"),
)

_LAYERS = (("shardcdc_cli", "cli"), ("cdcoperator", "operator"), ("cdcworker", "worker"))
_DEVKIT = frozenset({"localkafka", "vtgatesim", "kubetest", "connectstandalone", "promlocal", "sparkcluster",
                     "realvitess", "cdcdemo"})


def _imports(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def _arguments(tree: ast.AST) -> set[str]:
    return {a.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for a in [*node.args.args, *node.args.kwonlyargs]}


def _names(tree: ast.AST) -> set[str]:
    return ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
            | {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names})


def tier_of(path: Path) -> str:
    """The tier the rule (or an override) gives the test file at ``path``."""
    if path.name in OVERRIDES:
        return OVERRIDES[path.name][0]
    tree = ast.parse(path.read_text(), filename=str(path))
    imports = _imports(tree)
    if "connectstandalone" in imports:
        return "conformance"
    if "e2e" in path.stem or path.stem.startswith("test_demo"):
        return "e2e"
    if imports & SERVER_MODULES or _arguments(tree) & PROCESS_FIXTURES or _names(tree) & PROCESS_NAMES:
        return "integration"
    return "unit"


def package_of(path: Path) -> str:
    """The folder inside the tier: the highest layer of shardcdc the file imports."""
    # longest prefix first: test_kafka_broker (devkit) before test_kafka_ (worker)
    for prefix, folder in sorted(PREFIXES, key=lambda p: -len(p[0])):
        if path.name.startswith(prefix):
            return folder
    imports = _imports(ast.parse(path.read_text(), filename=str(path)))
    for package, folder in _LAYERS:
        if package in imports:
            return folder
    return "devkit" if imports & _DEVKIT else "repo"


def place(path: Path) -> Path:
    return TESTS / tier_of(path) / package_of(path) / path.name


_ROOT_ARITHMETIC = re.compile(r"Path\(__file__\)\.resolve\(\)\.(?:parent\.parent|parents\[\d+\])")


def rewrite_root(text: str, depth: int) -> str:
    """``Path(__file__).resolve().parent.parent`` (the repository root, seen from a flat test) for a
    file ``depth`` folders below the root."""
    return _ROOT_ARITHMETIC.sub(f"Path(__file__).resolve().parents[{depth}]", text)


def move(path: Path, dest: Path, dry_run: bool) -> None:
    print(f"{path.relative_to(ROOT)} -> {dest.relative_to(ROOT)}")
    if dry_run:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=ROOT,
                             capture_output=True).returncode == 0
    if tracked:
        subprocess.run(["git", "mv", str(path), str(dest)], cwd=ROOT, check=True)
    else:
        path.rename(dest)
    dest.write_text(rewrite_root(dest.read_text(), len(dest.relative_to(ROOT).parts) - 1))


def flat_tests() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def misplaced() -> list[str]:
    """Problems of today's layout: flat test files, files outside a tier or where the rule does not put them."""
    problems = [f"{p.relative_to(ROOT)}: a test file directly in tests/; run python scripts/test_tiers.py"
                for p in flat_tests()]
    for p in sorted(TESTS.rglob("test_*.py")):
        rel = p.relative_to(TESTS)
        if len(rel.parts) == 1 or rel.parts[0] not in TIERS:
            continue
        want = place(p)
        if want != p:
            problems.append(f"{p.relative_to(ROOT)}: the rule places it at {want.relative_to(ROOT)} "
                            f"(move it, or pin it in OVERRIDES in scripts/test_tiers.py with a reason)")
    return problems + same_names()


def same_names() -> list[str]:
    """Test files sharing a file name: pytest's default import mode imports a basename once, so the
    second fails to collect and stops the whole run (two branches each added a test_operator_apply.py)."""
    seen: dict[str, Path] = {}
    problems = []
    for p in sorted(TESTS.rglob("test_*.py")):
        if p.name in seen:
            problems.append(f"{p.relative_to(ROOT)}: the same file name as {seen[p.name].relative_to(ROOT)}; "
                            "rename one (test file names are unique across the tiers)")
        seen.setdefault(p.name, p)
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="flat test files to place (default: every tests/test_*.py)")
    ap.add_argument("--dry-run", action="store_true", help="print the moves, change nothing")
    ap.add_argument("--check", action="store_true", help="exit 1 when a test file is not where the rule puts it")
    args = ap.parse_args(argv)
    if args.check:
        problems = misplaced()
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    for path in [p.resolve() for p in args.files] or flat_tests():
        move(path, place(path), args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
