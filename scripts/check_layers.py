"""Check the import layering of shardcdc's packages against scripts/layers.toml (run by `make lint`).

Every ``import``/``from ... import`` in the packages' source counts, including those inside
functions (they hide cycles as well as module-level ones do). Two kinds of contract:

- ``forbidden``: no module of ``source`` imports any of ``forbidden`` (top-level package names).
- ``acyclic``: the graph of imports between the ``packages`` has no cycle.

A contract's ``exceptions`` list today's violations, each as ``"importer -> imported"`` (module
names as written) with a ``why``; they pass, any other violation fails. An exception that no longer
occurs fails too, so the list only shrinks (issue 26).

    python scripts/check_layers.py [--contracts FILE] [--root DIR] [--summary]
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = Path(__file__).resolve().parent / "layers.toml"


@dataclass(frozen=True, slots=True)
class Import:
    importer: str  # dotted module name of the importing file
    imported: str  # dotted module name as written (``from a.b import c`` -> ``a.b``)
    path: str  # file, relative to the root
    line: int

    @property
    def pair(self) -> str:
        return f"{self.importer} -> {self.imported}"


@dataclass(frozen=True, slots=True)
class Violation:
    contract: str
    message: str


def top(module: str) -> str:
    return module.split(".", 1)[0]


def module_name(path: Path, package_dir: Path, package: str) -> str:
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from`` import names (relative imports resolved against the importer)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, importer: str, root: Path, modules: set[str]) -> Iterator[Import]:
    """The imports of one file; ``from a import b`` names ``a.b`` when that is one of ``modules``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = str(path.relative_to(root))
    for node in ast.walk(tree):  # every node: imports inside functions and branches count too
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, rel, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, importer, path.name == "__init__.py")
            for name in sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}):
                yield Import(importer, name, rel, node.lineno)


def scan(packages: Mapping[str, str], root: Path) -> list[Import]:
    """Every import in every module of ``packages`` (name -> directory under ``root``)."""
    files = {path: module_name(path, root / directory, package)
             for package, directory in packages.items() for path in sorted((root / directory).rglob("*.py"))}
    modules = set(files.values())
    return [i for path, module in files.items() for i in imports_of(path, module, root, modules)]


def forbidden(imports: Iterable[Import], source: set[str], banned: set[str]) -> list[Import]:
    return [i for i in imports if top(i.importer) in source and top(i.imported) in banned]


def cycles(imports: Iterable[Import], packages: set[str]) -> list[list[str]]:
    """Strongly connected groups of two or more packages in the package import graph (Tarjan)."""
    graph: dict[str, set[str]] = {p: set() for p in packages}
    for i in imports:
        a, b = top(i.importer), top(i.imported)
        if a != b and a in graph and b in graph:
            graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def _exceptions(contract: Mapping[str, object]) -> dict[str, str]:
    listed: dict[str, str] = {}
    for entry in contract.get("exceptions", []) or []:  # type: ignore[attr-defined]
        listed[str(entry["import"])] = str(entry.get("why", ""))
    return listed


def check_contract(contract: Mapping[str, object], imports: list[Import]) -> tuple[list[Violation], list[Import]]:
    """(failures, excepted imports) of one contract: new violations, stale or reasonless exceptions."""
    name = str(contract["name"])
    listed = _exceptions(contract)
    failures = [Violation(name, f"exception {pair!r} has no `why`") for pair, why in listed.items() if not why.strip()]
    kind = contract["type"]
    if kind == "forbidden":
        found = forbidden(imports, set(contract["source"]), set(contract["forbidden"]))  # type: ignore[call-overload]
    elif kind == "acyclic":
        packages = set(contract["packages"])  # type: ignore[call-overload]
        # The excepted imports are taken out of the graph; any cycle left is made by the others.
        rest = [i for i in imports if i.pair not in listed]
        found = [i for i in imports if i.pair in listed and top(i.importer) != top(i.imported)]
        for group in cycles(rest, packages):
            members = set(group)
            culprits = sorted({f"{i.path}:{i.line}: {i.pair}" for i in rest
                               if top(i.importer) in members and top(i.imported) in members and
                               top(i.importer) != top(i.imported)})
            failures.append(Violation(name, "import cycle between packages " + " <-> ".join(group) + "; its imports:\n    "
                                      + "\n    ".join(culprits)))
    else:
        raise SystemExit(f"{CONTRACTS.name}: contract {name!r} has unknown type {kind!r} (forbidden or acyclic)")
    excepted = [i for i in found if i.pair in listed]
    if kind == "forbidden":
        failures += [Violation(name, f"{i.path}:{i.line}: {i.pair} (not allowed: move the code or invert the "
                                     f"dependency; a listed exception is not a fix)") for i in found if i.pair not in listed]
    seen = {i.pair for i in excepted}
    failures += [Violation(name, f"exception {pair!r} no longer occurs: remove it from {CONTRACTS.name}")
                 for pair in listed if pair not in seen]
    return failures, excepted


def unlisted(packages: Mapping[str, str], root: Path, generated: Iterable[str]) -> list[str]:
    """Packages pyproject.toml installs that the contracts do not know: a new package must be placed in a
    layer (and named in the contracts that concern it) before it can import anything unchecked."""
    pyproject = root / "pyproject.toml"
    if not pyproject.exists():
        return []
    installed = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return sorted(set(installed) - set(packages) - set(generated))


def run(contracts_path: Path, root: Path, summary: bool) -> int:
    doc = tomllib.loads(contracts_path.read_text())
    imports = scan(doc["packages"], root)
    missing = unlisted(doc["packages"], root, doc.get("generated", []))
    for package in missing:
        print(f"layers: package {package!r} (pyproject.toml package-dir) is not in {contracts_path.name} [packages]: "
              "add it there and to the contracts that concern it", file=sys.stderr)
    failed = bool(missing)
    for contract in doc["contract"]:
        failures, excepted = check_contract(contract, imports)
        if summary:
            pairs = {i.pair for i in excepted}
            print(f"{contract['name']}: {len(excepted)} excepted imports ({len(pairs)} module pairs), "
                  f"{len(failures)} failures")
        for v in failures:
            print(f"layers: {v.contract}: {v.message}", file=sys.stderr)
        failed = failed or bool(failures)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contracts", type=Path, default=CONTRACTS)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--summary", action="store_true", help="print each contract's count of excepted imports")
    args = ap.parse_args(argv)
    return run(args.contracts, args.root, args.summary)


if __name__ == "__main__":
    sys.exit(main())
