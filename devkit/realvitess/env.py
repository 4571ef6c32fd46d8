"""Where the Vitess binaries are and how processes of the cluster are started and stopped.

Every process starts in a session of its own, bound to the starting thread
(``cdcoperator.local.children``), as the unprivileged user when this process is root. ``stop`` stops the
group, then kills by pid any process still running from the cluster's directory (a ``mariadbd``
that ``mysqlctl`` left behind holds its port otherwise)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cdcoperator.local.children import start_bound, stop_group

MARIADB_ROOT = Path("/usr")  # VT_MYSQL_ROOT: mysqlctl looks for sbin/mariadbd (bin/mysqld_safe) under it


@dataclass(frozen=True)
class VitessEnv:
    home: Path  # the make vitess output: bin/, config/
    user: str | None  # run as this user (None: as ourselves, when not root)

    @property
    def bin(self) -> Path:
        return self.home / "bin"

    def ids(self) -> tuple[int, int] | None:
        if self.user is None:
            return None
        pw = pwd.getpwnam(self.user)
        return pw.pw_uid, pw.pw_gid


def vitess_env() -> VitessEnv:
    """The built Vitess of ``make vitess``; a clear error naming the missing piece otherwise."""
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
    home = Path(os.environ.get("SHARDCDC_VITESS_HOME", cache / "vitess-v24.0.4"))
    if not (home / ".complete").is_file():
        raise RuntimeError(f"Vitess is not built in {home}: run `make vitess` (or `make setup`) first")
    if not (MARIADB_ROOT / "sbin" / "mariadbd").is_file():
        raise RuntimeError("MariaDB's mariadbd is missing: run `make vitess` (it installs mariadb-server)")
    user = None
    if os.geteuid() == 0:
        user = os.environ.get("SHARDCDC_VITESS_USER", "vitess")
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise RuntimeError(f"user {user!r} is missing (mysqlctl refuses root): run `make vitess`") from None
    return VitessEnv(home, user)


class Processes:
    """The processes of one cluster, all under ``root`` (a private directory), stopped together."""

    def __init__(self, env: VitessEnv, root: Path) -> None:
        self.env, self.root = env, root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.vtroot = root / "vtroot"
        self.data = root / "data"

    def prepare(self, extra: Sequence[Path] = ()) -> None:
        """A VTROOT the unprivileged user can reach: the cache under ~root is not, so its binaries
        (and ``extra`` ones, e.g. etcd) are hard-linked (copied across file systems) and the config
        templates copied."""
        (self.vtroot / "bin").mkdir(parents=True)
        for exe in (*self.env.bin.iterdir(), *extra):
            try:
                os.link(exe, self.vtroot / "bin" / exe.name)
            except OSError:
                shutil.copy2(exe, self.vtroot / "bin" / exe.name)
        shutil.copytree(self.env.home / "config", self.vtroot / "config")
        (self.data / "logs").mkdir(parents=True)
        self.give(self.root)

    def give(self, path: Path) -> None:
        """Hand ``path`` (recursively) to the cluster's user."""
        ids = self.env.ids()
        if ids is None:
            return
        for dirpath, dirnames, filenames in os.walk(path):
            for name in (dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)):
                os.chown(name, *ids, follow_symlinks=False)

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {"PATH": f"{self.vtroot / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.root),
               "VTROOT": str(self.vtroot), "VTDATAROOT": str(self.data), "VT_MYSQL_ROOT": str(MARIADB_ROOT),
               "TMPDIR": str(self.root)}
        return {**env, **(extra or {})}

    def start(self, name: str, args: Sequence[str], extra_env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.root / "logs").joinpath(f"{name}.log")
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as out:
            proc = start_bound([str(self.vtroot / "bin" / args[0]), *args[1:]], as_ids=self.env.ids(), stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.environ(extra_env),
                               cwd=str(self.root))
        self.procs[name] = proc
        return proc

    def run(self, args: Sequence[str], timeout: float = 120.0) -> str:
        """Run a short command (``mysqlctl init``, ``vtctldclient ...``) to completion; its output, or a
        RuntimeError with the output's tail."""
        proc = start_bound([str(self.vtroot / "bin" / args[0]), *args[1:]], as_ids=self.env.ids(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           env=self.environ(), cwd=str(self.root))
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            stop_group(proc, kill=True)
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}): {text[-2000:]}")
        return text

    def log_tail(self, name: str, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "logs" / f"{name}.log").read_text(errors="replace")[-chars:]
        return ""

    def stop(self, name: str, timeout: float = 30.0, kill: bool = False) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            stop_group(proc, timeout, kill)

    def stop_all(self, timeout: float = 30.0, kill: bool = False) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name, timeout, kill)
        kill_strays(self.root)


def kill_strays(root: Path, timeout: float = 10.0) -> list[int]:
    """SIGKILL, by pid, every process whose command line names ``root`` (mariadbd started by
    mysqlctl outside our process groups); wait until they are gone. Returns their pids."""
    mark = str(root)
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{p}").exists() and not _zombie(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return ") Z " in Path(f"/proc/{pid}/stat").read_text()
    return True
