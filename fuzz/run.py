"""Build and run the native scanner/encoder fuzz target (fuzz/harness.c + fuzz/oracle.py).

    python fuzz/run.py [--seconds N] [--seed N] [--corpus DIR]   fuzz for N seconds (make fuzz)
    python fuzz/run.py --replay FILE...                          run inputs once (regressions)

The target is built with clang's libFuzzer, AddressSanitizer and UBSan into build/fuzz/ whenever a
source is newer than the binary; seeds (real VTGate test server responses, fuzz/seeds.py) are
written to build/fuzz/seeds (again when fuzz/seeds.py is newer). A finding stops the run with the input saved as
build/fuzz/artifacts/crash-*: turn it into a regression with `cp` into fuzz/regressions/ and a fix.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "fuzz"
NATIVE = ROOT / "worker" / "cdcworker" / "_native"
OUT = ROOT / "build" / "fuzz"
BINARY = OUT / "scanner_fuzz"
SEEDS = OUT / "seeds"
REGRESSIONS = FUZZ / "regressions"
DICTIONARY = FUZZ / "vstream.dict"
CLANG = os.environ.get("FUZZ_CC", "clang-14")
SOURCES = [FUZZ / "harness.c", *sorted(NATIVE.glob("*.c"))]
SANITIZE = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined"]
INSTALL_HINT = "install clang and its sanitizer runtimes: apt-get install clang-14 libclang-rt-14-dev (or `make fuzz-tools`)"


class FuzzError(RuntimeError):
    """The target cannot be built or run (one clear line: what and how to fix)."""


def build() -> Path:
    """The instrumented binary, rebuilt when a source or header changed."""
    if shutil.which(CLANG) is None:
        raise FuzzError(f"{CLANG} not found: {INSTALL_HINT}")
    deps = [*SOURCES, *NATIVE.glob("*.h"), Path(__file__)]
    if BINARY.exists() and all(p.stat().st_mtime <= BINARY.stat().st_mtime for p in deps):
        return BINARY
    OUT.mkdir(parents=True, exist_ok=True)
    libdir = sysconfig.get_config_var("LIBDIR")
    pylib = f"python{sysconfig.get_config_var('LDVERSION')}"
    cmd = [CLANG, "-g", "-O1", "-fno-omit-frame-pointer", *SANITIZE, f"-I{sysconfig.get_paths()['include']}",
           f"-I{NATIVE}", *map(str, SOURCES), f"-L{libdir}", f"-l{pylib}", f"-Wl,-rpath,{libdir}", "-ldl", "-lm",
           "-o", str(BINARY) + ".tmp"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        hint = INSTALL_HINT if "libclang_rt" in r.stderr or "cannot find" in r.stderr else "see the compiler output"
        raise FuzzError(f"building the fuzz target failed ({hint}):\n{r.stderr[-4000:]}")
    os.replace(str(BINARY) + ".tmp", BINARY)
    return BINARY


def seeds() -> Path:
    """The seed corpus (real VTGate test server responses), written again when seeds.py changes."""
    done = SEEDS / ".complete"
    if not done.exists() or done.stat().st_mtime < (FUZZ / "seeds.py").stat().st_mtime:
        spec = importlib.util.spec_from_file_location("shardcdc_fuzz_seeds", FUZZ / "seeds.py")
        assert spec and spec.loader
        seedgen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(seedgen)

        shutil.rmtree(SEEDS, ignore_errors=True)
        seedgen.write(SEEDS)
        (SEEDS / ".complete").touch()
    return SEEDS


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["FUZZ_SITEDIR"] = sysconfig.get_paths()["purelib"]
    e["PYTHONPATH"] = str(FUZZ)
    # Python frees nothing at exit (leaks are noise); abort so libFuzzer saves the input.
    e["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1:symbolize=1:allocator_may_return_null=1"
    e["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    e["SHARDCDC_NATIVE"] = "1"
    return e


def fuzz(seconds: int, seed: int, corpus: Path, artifacts: Path, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Fuzz for ``seconds`` from the seeds and the regressions; the new inputs go to ``corpus``."""
    binary, seed_dir = build(), seeds()
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    cmd = [str(binary), f"-seed={seed}", f"-max_total_time={seconds}", "-max_len=16384", "-timeout=30",
           "-rss_limit_mb=4096", "-print_final_stats=1", f"-dict={DICTIONARY}", f"-artifact_prefix={artifacts}/",
           str(corpus), str(seed_dir), str(REGRESSIONS)]
    return _run(cmd, log)


def replay(files: list[Path], log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs each input once through the oracle (no fuzzing)."""
    return _run([str(build()), "-runs=1", *map(str, files)], log)


def _run(cmd: list[str], log: Path | None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, errors="replace")
    if log is not None:
        log.write_text(r.stdout + r.stderr)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", type=Path, default=OUT / "corpus")
    ap.add_argument("--replay", type=Path, nargs="*")
    args = ap.parse_args()
    try:
        if args.replay is not None:
            r = replay(args.replay)
        else:
            r = fuzz(args.seconds, args.seed, args.corpus, OUT / "artifacts")
    except FuzzError as e:
        print(f"fuzz: {e}", file=sys.stderr)
        return 2
    sys.stderr.write(r.stderr[-20000:])
    if r.returncode != 0:
        print(f"fuzz: a finding (exit {r.returncode}); the input is in {OUT / 'artifacts'}", file=sys.stderr)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
