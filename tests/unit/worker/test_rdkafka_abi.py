"""kafkaprod.c's hand-declared librdkafka ABI (``_native/rdkafka_abi.h``) is librdkafka's.

The native producer calls the librdkafka that confluent-kafka bundles through dlsym, with
structures and signatures declared by hand. ``abi_check/rdkafka_abi_check.c`` asserts at compile
time, against a real ``rdkafka.h`` (``make rdkafka-header``), that every field of
``rd_kafka_message_t`` and ``rd_kafka_vu_t`` sits where we read it, every constant and every
function signature is the same. The check is proven to fail on a header with a moved field or a
changed signature; the header must be the bundled release's (or the pair accepted below), and the
bundled binary itself must agree on the constants and fill a delivery report where we read it.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import time
from pathlib import Path

import confluent_kafka
import pytest

from cdcworker import nativesink
from cdcworker.events import native

NATIVE = Path(__file__).resolve().parents[3] / "worker" / "cdcworker" / "_native"
CHECK = NATIVE / "abi_check" / "rdkafka_abi_check.c"
# Bundled librdkafka -> the rdkafka.h release it is checked against when no registry reachable
# here ships the bundled release's header (2.16.0: Debian has 2.14.2, npm 2.15.1). The structures
# and signatures used are the same in both (librdkafka keeps its ABI within 2.x); an upgrade of
# confluent-kafka must add its pair here after pointing the Makefile's RDKAFKA_H_NPM at the header.
ACCEPTED = {"2.16.0": "2.15.1"}


def _header() -> Path:
    path = Path(os.environ.get("SHARDCDC_RDKAFKA_H", ""))
    assert path.is_file(), "rdkafka.h is missing: run `make rdkafka-header` (SHARDCDC_RDKAFKA_H names it)"
    return path


def _compile(include_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gcc", "-fsyntax-only", "-Wall", "-Werror", f"-I{include_dir}", f"-I{NATIVE}", str(CHECK)],
                          capture_output=True, text=True)


def _header_version(path: Path) -> str:
    m = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", path.read_text())
    assert m, f"no RD_KAFKA_VERSION in {path}"
    v = int(m.group(1), 16)
    return f"{v >> 24}.{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}"


def test_declarations_match_rdkafka_h() -> None:
    r = _compile(_header().parent)
    assert r.returncode == 0, r.stderr


def test_the_header_is_the_bundled_release() -> None:
    bundled = confluent_kafka.libversion()[0]
    checked = _header_version(_header())
    assert checked == bundled or ACCEPTED.get(bundled) == checked, (
        f"confluent-kafka bundles librdkafka {bundled}, the ABI check reads rdkafka.h {checked}: point the "
        f"Makefile's RDKAFKA_H_NPM at a package shipping {bundled}'s rdkafka.h, run `make rdkafka-header`, "
        "and update ACCEPTED here if only an earlier release's header is to be had")


@pytest.mark.parametrize(("before", "after", "message"), [
    ("int32_t partition;", "int64_t partition;", "rd_kafka_message_t.partition changed size"),
    ("size_t key_len;", "size_t key_len; size_t pad;", "rd_kafka_message_t.offset moved"),
    ("RD_KAFKA_RESP_ERR__QUEUE_FULL = -184", "RD_KAFKA_RESP_ERR__QUEUE_FULL = -183", "RD_KAFKA_RESP_ERR__QUEUE_FULL"),
    ("int rd_kafka_poll(rd_kafka_t *rk, int timeout_ms);", "int rd_kafka_poll(rd_kafka_t *rk, long timeout_ms);",
     "rd_kafka_poll has another signature"),
])
def test_the_check_fails_when_the_header_moves(before: str, after: str, message: str, tmp_path: Path) -> None:
    text = _header().read_text()
    at = text.index("typedef struct rd_kafka_message_s {") if "_t." in message else 0  # a field of that struct
    assert before in text[at:], f"{before!r} not in rdkafka.h: update this test's edit"
    (tmp_path / "rdkafka.h").write_text(text[:at] + text[at:].replace(before, after, 1))
    r = _compile(tmp_path)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def _library() -> ctypes.CDLL:
    path = nativesink.librdkafka_path()
    assert path is not None, "confluent-kafka's librdkafka is not loaded"
    return ctypes.CDLL(path)


def test_the_bundled_library_agrees_on_the_constants() -> None:
    lib = _library()
    lib.rd_kafka_err2name.restype = ctypes.c_char_p
    lib.rd_kafka_err2name.argtypes = [ctypes.c_int]
    names = {-169: b"_AUTHENTICATION", -181: b"_SSL", -184: b"_QUEUE_FULL", -186: b"_INVALID_ARG"}
    assert {code: lib.rd_kafka_err2name(code) for code in names} == names
    lib.rd_kafka_version.restype = ctypes.c_int
    assert lib.rd_kafka_version() == confluent_kafka.libversion()[1]


def test_a_delivery_report_is_read_where_the_bundled_library_writes_it() -> None:
    """A record that expires (no broker on 127.0.0.1:9) comes back through the delivery callback,
    which reads err, rkt, partition, payload, len, key, key_len and _private from rd_kafka_message_t."""
    assert native.available(), "the native extension is not built: run `make native`"
    producer = native.rowenc.Producer(nativesink.librdkafka_path(), {
        "bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 10, "log_level": 0}, nativesink._kafka_error)
    producer.send("abi.topic", b"the-key", b"the value bytes", [("h", b"v")], 3)
    seq = producer.seal()
    deadline = time.monotonic() + 20
    errors: list = []
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
        errors = list(producer.take_errors())
    assert errors, "no delivery report within 20 s"
    assert errors == [(seq, -192, "Local: Message timed out", "abi.topic", 3, b"the-key", b"the value bytes")]
    assert producer.done_through() == seq
