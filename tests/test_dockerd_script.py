"""scripts/dockerd.sh: a Docker engine is started only when none answers, and `stop` ends only an
engine that `start` started. A stand-in `dockerd` (a sleeping process that marks the engine up) and
`docker` (answers `info` while that mark exists) keep the real engine of the machine out of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from polling import wait_for

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "dockerd.sh"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dockerd.sh starts an engine only as root")


@pytest.fixture
def fake_engine(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    up = tmp_path / "engine-up"
    (bin_dir / "dockerd").write_text(f'#!/bin/sh\necho "dockerd $*"\ntouch {up}\nexec sleep 300\n')
    (bin_dir / "docker").write_text(
        f'#!/bin/sh\n[ -f {up} ] || exit 1\n[ "$1" = version ] && echo 99.0\nexit 0\n')
    for tool in ("dockerd", "docker"):
        (bin_dir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "SHARDCDC_CACHE": str(tmp_path / "cache")}


def _run(env: dict[str, str], verb: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), verb], env=env, capture_output=True, text=True, timeout=90,
                          check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_starts_an_engine_when_none_answers_and_stops_only_that_one(fake_engine: dict[str, str],
                                                                    tmp_path: Path) -> None:
    pidfile = tmp_path / "cache" / "docker" / "dockerd.pid"
    r = _run(fake_engine, "start")
    assert r.returncode == 0, r.stderr
    pid = int(pidfile.read_text())
    assert r.stdout.startswith(f"docker: started dockerd 99.0 (pid {pid}, data {tmp_path}/cache/docker/data")
    log = (tmp_path / "cache" / "logs" / "dockerd.log").read_text()
    # Its data under the cache; published ports on loopback only.
    assert f"--data-root {tmp_path}/cache/docker/data" in log and "--ip 127.0.0.1" in log
    # A second start finds the engine answering and starts nothing.
    again = _run(fake_engine, "start")
    assert again.stdout.startswith("docker: using the running engine") and int(pidfile.read_text()) == pid
    r = _run(fake_engine, "stop")
    assert r.returncode == 0 and r.stdout.strip() == f"docker: stopped the dockerd this project started (pid {pid})"
    wait_for(lambda: not _alive(pid), timeout=30, what="the started dockerd to exit")
    assert not pidfile.exists()


def test_an_engine_it_did_not_start_is_left_running(fake_engine: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "engine-up").touch()  # somebody else's engine answers
    assert _run(fake_engine, "start").stdout.startswith("docker: using the running engine")
    assert not (tmp_path / "cache" / "docker" / "dockerd.pid").exists()
    r = _run(fake_engine, "stop")
    assert (r.returncode, r.stdout) == (0, "")


def test_cli_names_a_buildkit_capable_docker(fake_engine: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "engine-up").touch()
    # The stand-in `docker` now answers `buildx version` (exit 0): it is the one to build with.
    assert _run(fake_engine, "cli").stdout.strip() == "docker"
    r = _run(fake_engine, "nonsense")
    assert (r.returncode, r.stderr.strip()) == (1, "dockerd.sh: usage: dockerd.sh start|stop|cli")
