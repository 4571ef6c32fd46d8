"""Issue 26's code figures (scripts/code_figures.py) count ``Any`` honestly: a JSON-document alias of
cdcworker.jsontypes is counted apart as documented dynamic (never silently as typed), bare and
nested ``Any`` are counted, and an ``Any`` without a reason comment is listed with its line."""

from __future__ import annotations

import ast
from pathlib import Path

from loading import load_script

ROOT = Path(__file__).resolve().parents[3]
figures = load_script(ROOT / "scripts" / "code_figures.py", "code_figures_under_test")

SAMPLE = '''
from typing import Any

from cdcworker.jsontypes import JsonMapping, JsonObject


def bare(x: Any) -> None: ...


def nested(x: dict[str, Any]) -> list[Any]: ...


def explained(x: Any) -> None:  # Any: a protobuf message (generated code)
    ...


# Any: the callback's argument, as the library passes it
def above(x: Any) -> None: ...


def other_comment(x: Any) -> None:  # the value to print
    ...


def documented(doc: JsonMapping) -> JsonObject: ...


class C:
    field: Any = None
'''


def test_the_aliases_counted_are_the_ones_jsontypes_defines() -> None:
    module = ast.parse((ROOT / "worker" / "cdcworker" / "jsontypes.py").read_text())
    exported = next(ast.literal_eval(n.value) for n in module.body
                    if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    assert set(figures.JSON_ALIASES) == set(exported)


def test_any_is_counted_and_unexplained_any_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "sample.py"
    path.write_text(SAMPLE)
    rel = figures._rel  # paths outside the tree: report them as given
    figures._rel = lambda p: p.name
    try:
        assert figures.any_annotations([path]) == {"sample.py": 7}
        assert figures.bare_any([path]) == 5
        lines = SAMPLE.splitlines()
        assert figures.any_without_reason([path]) == [
            f"sample.py:{i + 1}" for i, line in enumerate(lines)
            if line.startswith(("def bare", "def nested", "def other_comment")) or "field: Any" in line
            for _ in range(2 if line.startswith("def nested") else 1)
        ]
        assert figures.json_alias_uses([path]) == 2
    finally:
        figures._rel = rel
