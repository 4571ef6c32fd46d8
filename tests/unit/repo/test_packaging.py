"""The wheel carries every package: pyproject lists packages explicitly (named packages inside the
layout's folders), so a subpackage missing from the list is absent from `pip install .` and from the
images while an editable install still finds it. The kind e2e found exactly that: the operator image
died at start with "No module named 'cdcworker.config'"."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _setuptools() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool: dict[str, object] = data["tool"]["setuptools"]
    return tool


def test_every_package_directory_is_listed() -> None:
    tool = _setuptools()
    package_dir = tool["package-dir"]
    assert isinstance(package_dir, dict)
    on_disk = set()
    for name, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            on_disk.add(".".join([name, *init.parent.relative_to(base).parts]))
    listed = tool["packages"]
    assert isinstance(listed, list)
    assert sorted(on_disk - set(listed)) == []  # build/gen/vitessapi exists only after `make proto`
    assert sorted(set(listed) - on_disk - {"vitessapi"}) == []
    assert {"cdcworker.config", "cdcoperator.local", "cdcworker.source"} <= set(listed)
