"""The project's MariaDB patch set over Vitess's config templates (scripts/vitess/mariadb.patch,
applied by scripts/build-vitess.sh) still fits the pinned upstream module, and does what it is for:
no semisync plugin files, no super_read_only (MariaDB 10.11 has neither). When Vitess is bumped and
its templates move, this fails before the build does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PATCH = ROOT / "scripts" / "vitess" / "mariadb.patch"
PATCHED = ("config/init_db.sql", "config/mycnf/mariadb10.cnf", "config/mycnf/test-suite.cnf")


def _module_version() -> str:
    found = re.search(r"^VITESS_MODULE_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert found, "Makefile pins VITESS_MODULE_VERSION"
    return found.group(1)


@pytest.fixture(scope="module")
def upstream() -> Path:
    """The pinned module as the Go module proxy serves it (from the shared cache when present)."""
    if shutil.which("go") is None:
        raise RuntimeError("Go is needed to check the Vitess patch set (make vitess builds Vitess with it)")
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc")) / "go"
    env = {**os.environ, "GOMODCACHE": str(cache / "mod"), "GOFLAGS": "-modcacherw", "GOWORK": "off",
           "GOPROXY": os.environ.get("GOPROXY_OVERRIDE", "https://proxy.golang.org")}
    out = subprocess.run(["go", "mod", "download", "-json", f"vitess.io/vitess@{_module_version()}"], env=env,
                         cwd="/tmp", capture_output=True, text=True, check=True, timeout=600).stdout
    return Path(json.loads(out)["Dir"])


def test_the_patch_applies_to_the_pinned_upstream_templates(upstream: Path, tmp_path: Path) -> None:
    for rel in PATCHED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(upstream / rel, tmp_path / rel)
    done = subprocess.run(["git", "apply", "-p1", str(PATCH)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, f"mariadb.patch no longer fits vitess.io/vitess@{_module_version()}: {done.stderr}"
    init_db = (tmp_path / "config/init_db.sql").read_text()
    assert not [ln for ln in init_db.splitlines() if "super_read_only" in ln and not ln.startswith("#")]
    assert "GRANT" in init_db  # only the three statements went, not the users and grants
    assert not re.search(r"^\s*plugin-load", (tmp_path / "config/mycnf/mariadb10.cnf").read_text(), re.M)
    assert "gtid_strict_mode = 1" in (tmp_path / "config/mycnf/mariadb10.cnf").read_text()
    assert not re.search(r"^\s*super-read-only", (tmp_path / "config/mycnf/test-suite.cnf").read_text(), re.M)


def test_the_patch_touches_only_the_config_templates() -> None:
    touched = re.findall(r"^\+\+\+ b/(\S+)", PATCH.read_text(), re.M)
    assert sorted(touched) == sorted(PATCHED)
