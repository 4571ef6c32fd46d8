"""Issue 26's code figures for product code (cdcworker, cdcoperator), re-runnable before and after.

    .venv/bin/python scripts/code_figures.py [--top 5] [--json]

Prints: the largest functions (lines from ``def`` to the last line of the body, decorators
excluded); the count of ``Any`` annotations (each ``Any`` name inside an annotation: arguments,
returns, annotated assignments), how many of them are bare and how many have no reason comment
(a ``#`` comment naming ``Any`` on the annotation's lines, the ``def`` line or the line above);
apart from them, the uses of the JSON-document aliases of ``cdcworker.jsontypes`` ("documented
dynamic": ``Any`` under a name whose module says why), so a reader sees ``Any`` cut, not renamed;
private cross-module accesses (ruff's SLF001 on product code, whatever pyproject says); and the
pairs the ``duplicates`` tool lists within product code.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = [ROOT / "cli" / "shardcdc_cli", ROOT / "worker" / "cdcworker", ROOT / "operator" / "cdcoperator"]


def product_files() -> list[Path]:
    return sorted(p for d in PRODUCT if d.is_dir() for p in d.rglob("*.py"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def functions(files: list[Path]) -> list[tuple[int, str]]:
    """(lines, "path:qualified.name") of every function and method."""
    out: list[tuple[int, str]] = []

    def walk(node: ast.AST, prefix: str, path: Path) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                out.append(((child.end_lineno or child.lineno) - child.lineno + 1, f"{_rel(path)}:{child.lineno} {name}"))
                walk(child, name + ".", path)
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.", path)
            else:
                walk(child, prefix, path)

    for path in files:
        walk(ast.parse(path.read_text(), str(path)), "", path)
    return sorted(out, reverse=True)


def _any_in(annotation: ast.AST | None) -> int:
    if annotation is None:
        return 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        return len(re.findall(r"\bAny\b", annotation.value))
    return sum(1 for n in ast.walk(annotation)
               if (isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any"))


def _bare(annotation: ast.AST | None) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Constant) and annotation.value == "Any")


def bare_any(files: list[Path]) -> int:
    """Annotations that are ``Any`` itself (not ``dict[str, Any]``): the loosest seams."""
    total = 0
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.arg | ast.AnnAssign):
                total += _bare(node.annotation)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                total += _bare(node.returns)
    return total


JSON_ALIASES = frozenset(("JsonValue", "JsonObject", "JsonMapping", "JsonList"))  # cdcworker/jsontypes.py


def _aliases_in(annotation: ast.AST | None) -> int:
    if annotation is None:
        return 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return sum(len(re.findall(rf"\b{a}\b", annotation.value)) for a in JSON_ALIASES)
    return sum(1 for n in ast.walk(annotation)
               if (isinstance(n, ast.Name) and n.id in JSON_ALIASES) or (isinstance(n, ast.Attribute) and n.attr in JSON_ALIASES))


def _annotations(tree: ast.AST) -> list[tuple[ast.AST, int]]:
    """Every annotation in a module, with the first line its reason comment may sit on (the def's)."""
    out: list[tuple[ast.AST, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    out.append((arg.annotation, node.lineno))
            if node.returns is not None:
                out.append((node.returns, node.lineno))
        elif isinstance(node, ast.AnnAssign):
            out.append((node.annotation, node.lineno))
    return out


def _has_reason(lines: list[str], annotation: ast.AST, first: int) -> bool:
    """A comment naming ``Any`` on the line above the def (or assignment) through the annotation's last line."""
    last = annotation.end_lineno or annotation.lineno
    return any("#" in line and "Any" in line.split("#", 1)[1] for line in lines[max(first - 2, 0):last])


def any_annotations(files: list[Path]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in files:
        total = sum(_any_in(ann) for ann, _ in _annotations(ast.parse(path.read_text(), str(path))))
        if total:
            counts[_rel(path)] = total
    return counts


def any_without_reason(files: list[Path]) -> list[str]:
    """"path:line" of every annotation holding ``Any`` with no reason comment."""
    out: list[str] = []
    for path in files:
        text = path.read_text()
        lines = text.splitlines()
        for ann, first in _annotations(ast.parse(text, str(path))):
            if _any_in(ann) and not _has_reason(lines, ann, first):
                out.append(f"{_rel(path)}:{ann.lineno}")
    return out


def json_alias_uses(files: list[Path]) -> int:
    return sum(_aliases_in(ann) for path in files for ann, _ in _annotations(ast.parse(path.read_text(), str(path))))


def slf001() -> list[str]:
    ruff = ROOT / ".venv" / "bin" / "ruff"
    cmd = [str(ruff if ruff.exists() else "ruff"), "check", "--isolated", "--select", "SLF001",
           "--output-format", "concise", *[str(d) for d in PRODUCT]]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return [line for line in res.stdout.splitlines() if "SLF001" in line]


def duplicates() -> list[str]:
    """Rows of the duplicates tool, run over the whole tree, with both sides in product code."""
    if not shutil.which("duplicates"):
        return ["(the duplicates tool is not on PATH)"]
    res = subprocess.run(["duplicates", "--most", "200", "--seconds", "120"], capture_output=True, text=True, cwd=ROOT)
    side = r"(?:cli/shardcdc_cli|worker/cdcworker|operator/cdcoperator)/\S+"
    return [line.strip() for line in res.stdout.splitlines() if re.match(rf"\s*D\d+ {side} ~ {side}", line)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=5, help="how many of the largest functions to list")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of text")
    args = ap.parse_args()
    files = product_files()
    funcs = functions(files)
    anys = any_annotations(files)
    unexplained = any_without_reason(files)
    slf = slf001()
    dups = duplicates()
    over = [f for f in funcs if f[0] > 80]
    if args.json:
        json.dump({"largest_function": {"lines": funcs[0][0], "name": funcs[0][1]},
                   "functions_over_80": len(over), "any_annotations": sum(anys.values()), "bare_any": bare_any(files),
                   "any_without_reason": len(unexplained), "json_alias_uses": json_alias_uses(files),
                   "slf001": len(slf), "duplicate_pairs": len(dups)}, sys.stdout, indent=2)
        print()
        return
    print(f"product files: {len(files)}")
    print(f"largest functions (lines; {len(over)} over 80):")
    for n, name in funcs[:args.top]:
        print(f"  {n:4d}  {name}")
    print(f"Any annotations: {sum(anys.values())} (of which bare `Any`: {bare_any(files)}; "
          f"without a reason comment: {len(unexplained)})")
    for path, n in sorted(anys.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {n:4d}  {path}")
    for where in unexplained[:args.top]:
        print(f"  no reason: {where}")
    print(f"documented dynamic (JSON-document aliases of cdcworker.jsontypes, Any by design): "
          f"{json_alias_uses(files)} uses")
    waived = sum(p.read_text().count("noqa: SLF001") for p in files)
    print(f"private cross-module accesses (ruff SLF001): {len(slf)} (and {waived} waived with a reason)")
    print(f"duplicate pairs in product code: {len(dups)}")
    for row in dups:
        print(f"  {row}")


if __name__ == "__main__":
    main()
