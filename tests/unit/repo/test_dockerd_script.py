"""scripts/dockerd.sh: a Docker engine is started only when none answers, and `stop` ends only an
engine that `start` started. A stand-in `dockerd` (a sleeping process that marks the engine up) and
`docker` (answers `info` while that mark exists) keep the real engine of the machine out of it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from polling import wait_for

ROOT = Path(__file__).resolve().parents[3]
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


def _full_bounding_set() -> bool:
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    bnd = next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("CapBnd:"))
    return int(bnd, 16) == (1 << (last + 1)) - 1


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
    assert r.stdout.splitlines()[-1].startswith(f"docker: started dockerd 99.0 (pid {pid}, data {tmp_path}/cache/docker/data")
    log = (tmp_path / "cache" / "logs" / "dockerd.log").read_text()
    # Its data under the cache; published ports on loopback only.
    assert f"--data-root {tmp_path}/cache/docker/data" in log and "--ip 127.0.0.1" in log
    # Where this machine cannot grant every capability, containers run through runc-bounded.
    full = _full_bounding_set()
    assert ("--default-runtime runc-bounded" in log) is (not full)
    assert ("runc-bounded" in r.stdout) is (not full)
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


def test_runc_bounded_drops_only_capabilities_outside_the_bounding_set(tmp_path: Path) -> None:
    """kind's `--privileged` nodes and privileged pods ask for every capability; the wrapper passes
    runc the ones this process's bounding set has, untouched otherwise (create and exec)."""
    wrapper = ROOT / "images" / "kind-node" / "runc-bounded"
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    bnd = int(next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines()
                   if ln.startswith("CapBnd:")), 16)
    names = ["CAP_CHOWN", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_BPF"]
    numbers = {"CAP_CHOWN": 0, "CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21, "CAP_SYS_RESOURCE": 24, "CAP_BPF": 39}
    allowed = [n for n in names if numbers[n] <= last and bnd >> numbers[n] & 1]
    caps = {"bounding": names, "effective": names, "permitted": names}
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {"capabilities": caps}}))
    proc = tmp_path / "process.json"
    proc.write_text(json.dumps({"args": ["sh"], "capabilities": caps}))
    env = {**os.environ, "RUNC_BOUNDED_REAL": "echo"}
    for args in (["create", "--bundle", str(bundle), "c1"], ["exec", f"--process={proc}", "c1"]):
        r = subprocess.run(["sh", str(wrapper), *args], env=env, capture_output=True, text=True, check=True)
        assert r.stdout.split() == args  # the real runc gets the same arguments
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["ociVersion"] == "1.0.2"
    assert spec["process"]["capabilities"] == {k: allowed for k in caps}
    assert json.loads(proc.read_text())["capabilities"] == {k: allowed for k in caps}
