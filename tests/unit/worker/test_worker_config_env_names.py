"""Every SHARDCDC_* variable the repository sets or reads is either a tooling variable or a property.

`make` exports tooling variables (cache paths, tool binaries) into every process a test starts; a
name the loader does not reserve becomes an "unknown property" and every worker refuses to start.
"""

from __future__ import annotations

import re
from pathlib import Path

from cdcworker.config.loader import env_to_property, is_reserved_env
from cdcworker.config.properties import PROPERTIES, family_of, pattern_of

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("Makefile", "scripts", "cli", "worker", "operator", "devkit", "charts", "images", "bench", "fuzz", "deploy", ".ci")
NAME = re.compile(r"\bSHARDCDC_[A-Z0-9_]*[A-Z0-9]\b")


def _names_in_repo() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in SCANNED:
        root = REPO / top
        paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in paths:
            if path.suffix in {".so", ".pyc", ".png"} or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            for name in NAME.findall(text):
                found.setdefault(name, path)
    return found


def test_repository_env_names_are_reserved_or_properties() -> None:
    names = _names_in_repo()
    assert "SHARDCDC_CACHE" in names and "SHARDCDC_LOG_LEVEL" in names  # the scan sees the tree
    unknown = {}
    for name, path in names.items():
        if is_reserved_env(name):
            continue
        key = env_to_property(name)
        if key in PROPERTIES or family_of(key) or pattern_of(key):
            continue
        unknown[name] = str(path.relative_to(REPO))
    assert unknown == {}, "reserve these in cdcworker.config.loader.RESERVED_ENV_TOOLING or fix the name"


def test_tooling_names_never_become_properties() -> None:
    for name in ("SHARDCDC_HELM", "SHARDCDC_NATIVE", "SHARDCDC_OPERATOR_STATE_DIR", "SHARDCDC_CACHE"):
        assert is_reserved_env(name)
    assert not is_reserved_env("SHARDCDC_DATABASE_HOSTNAME")
