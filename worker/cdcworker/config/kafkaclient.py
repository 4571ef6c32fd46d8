"""Kafka Connect's client settings (Java names) as librdkafka settings.

Users bring the ``producer.*`` / ``sasl.*`` / ``ssl.*`` settings of their Debezium deployment, and
the operator mounts a Secret's ``sasl.jaas.config`` as a file. librdkafka has no JAAS and reads no
Java key stores: it refuses ``sasl.jaas.config`` and ``ssl.truststore.location`` outright, so these
are translated here (one pure function, used for every client the worker and its tools create):

* ``sasl.jaas.config``: PLAIN and SCRAM login modules → ``sasl.username`` / ``sasl.password``;
  OAUTHBEARER with client credentials → librdkafka's OIDC settings. Kerberos is refused: the
  librdkafka of the confluent-kafka wheel is built without libsasl2, so GSSAPI cannot work.
* Trust store: PEM (file or ``ssl.truststore.certificates``) → ``ssl.ca.location`` / ``ssl.ca.pem``;
  PKCS12 → its certificates read here into ``ssl.ca.pem``. Without ``.type``, the file's content
  says which it is.
* Key store: PKCS12 is read by librdkafka itself; PEM (file, or ``ssl.keystore.certificate.chain``
  with ``ssl.keystore.key``) → ``ssl.certificate.*`` / ``ssl.key.*``.
* ``ssl.endpoint.identification.algorithm`` empty (Java's "do not verify") → ``none``.
* Java-only tuning (``ssl.protocol``, ``ssl.enabled.protocols``, ``sasl.login.*``...) is dropped:
  OpenSSL negotiates the protocol and librdkafka has no such knobs.

JKS stores cannot be read without a JVM: the error says how to convert them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"

# Java client settings with no librdkafka counterpart and no effect on what is sent.
JAVA_ONLY = frozenset({
    "ssl.protocol", "ssl.enabled.protocols", "ssl.provider", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.engine.factory.class",
    "sasl.login.class", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
})

_JKS_HINT = ("librdkafka cannot read JKS stores; convert it once, e.g. `keytool -importkeystore -srckeystore "
             "store.jks -destkeystore store.p12 -deststoretype PKCS12`, and set {key}=PKCS12 (or use PEM)")

# One JAAS entry: `<LoginModule class> <flag> key=value ... ;` (values quoted, or bare tokens).
_JAAS_ENTRY = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


PER_CLIENT_PREFIXES = ("producer.", "consumer.", "admin.")


def client_key(key: str) -> str:
    """A client setting's name without its per-client prefix (``producer.sasl.jaas.config``)."""
    return next((key[len(p):] for p in PER_CLIENT_PREFIXES if key.startswith(p)), key)


class ClientSettingError(ValueError):
    """A client setting that cannot be given to librdkafka, named by its (Java) key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """The login module and its options of a one-entry ``sasl.jaas.config``."""
    match = _JAAS_ENTRY.fullmatch(text)
    if match is None:
        raise ClientSettingError("sasl.jaas.config", "expected '<LoginModule> required key=\"value\" ...;'")
    module, _flag, rest = match.groups()
    options: dict[str, str] = {}
    pos = 0
    rest = rest.rstrip().rstrip(";")
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        opt = _JAAS_OPTION.match(rest, pos)
        if opt is None:
            # The value holds a password: say where, never what.
            raise ClientSettingError("sasl.jaas.config", f"cannot read option {len(options) + 1} of {module}: "
                                     'expected key="value" or key=value')
        key, quoted, bare = opt.groups()
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        pos = opt.end()
    return module, options


def _from_jaas(text: str) -> dict[str, str]:
    module, options = parse_jaas(text)

    def need(*names: str) -> list[str]:
        missing = [n for n in names if not options.get(n)]
        if missing:
            raise ClientSettingError("sasl.jaas.config", f"{module} needs {', '.join(missing)}")
        return [options[n] for n in names]

    if module in (PLAIN_MODULE, SCRAM_MODULE):
        username, password = need("username", "password")
        return {"sasl.username": username, "sasl.password": password}
    if module == OAUTH_MODULE:
        client_id, secret = need("clientId", "clientSecret")
        out = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client_id,
               "sasl.oauthbearer.client.secret": secret}
        if options.get("scope"):
            out["sasl.oauthbearer.scope"] = options["scope"]
        return out
    if module == KERBEROS_MODULE:
        raise ClientSettingError("sasl.jaas.config", "Kerberos (GSSAPI) is not supported: the worker's Kafka client "
                                 "(librdkafka, built without libsasl2) has no GSSAPI; use SCRAM, PLAIN over TLS "
                                 "or OAUTHBEARER")
    raise ClientSettingError(
        "sasl.jaas.config",
        f"login module {module} is not supported; use {PLAIN_MODULE}, {SCRAM_MODULE} or {OAUTH_MODULE} (client "
        "credentials)",
    )


def _pkcs12_certificates(path: str, password: str | None) -> str:
    """The certificates of a PKCS12 trust store, as PEM."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        store = pkcs12.load_pkcs12(Path(path).read_bytes(), password.encode() if password else None)
    except (OSError, ValueError) as exc:
        raise ClientSettingError("ssl.truststore.location", f"cannot read the PKCS12 trust store {path}: {exc}") from exc
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise ClientSettingError("ssl.truststore.location", f"the PKCS12 trust store {path} holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _store_kind(conf: dict[str, str], key: str) -> str:
    """The store's type as set, or (Java would assume JKS) as its file shows: a PEM file or a
    PKCS12 one given without a type then works, and a JKS one gets the conversion hint."""
    kind = conf.pop(f"{key}.type", None)
    if kind:
        return kind.upper()
    location = conf.get(f"{key}.location")
    try:
        head = Path(location).read_bytes()[:4096] if location else b""
    except OSError:
        head = b""
    if head.startswith(b"\xfe\xed\xfe\xed"):
        return "JKS"
    return "PEM" if b"-----BEGIN" in head else "PKCS12" if head else "JKS"


def _trust_store(conf: dict[str, str]) -> None:
    kind = _store_kind(conf, "ssl.truststore")
    location = conf.pop("ssl.truststore.location", None)
    inline = conf.pop("ssl.truststore.certificates", None)
    password = conf.pop("ssl.truststore.password", None)
    if inline:
        conf["ssl.ca.pem"] = inline
    elif location is None:
        return
    elif kind == "PEM":
        conf["ssl.ca.location"] = location
    elif kind == "PKCS12":
        conf["ssl.ca.pem"] = _pkcs12_certificates(location, password)
    elif kind == "JKS":
        raise ClientSettingError("ssl.truststore.location", _JKS_HINT.format(key="ssl.truststore.type"))
    else:
        raise ClientSettingError("ssl.truststore.type", f"{kind} is not supported: use PEM or PKCS12")


def _key_store(conf: dict[str, str]) -> None:
    kind = _store_kind(conf, "ssl.keystore")
    chain = conf.pop("ssl.keystore.certificate.chain", None)
    key = conf.pop("ssl.keystore.key", None)
    if chain or key:
        if not (chain and key):
            raise ClientSettingError("ssl.keystore.key", "ssl.keystore.certificate.chain and ssl.keystore.key go together")
        conf["ssl.certificate.pem"], conf["ssl.key.pem"] = chain, key
        return
    location = conf.get("ssl.keystore.location")
    if location is None:
        conf.pop("ssl.keystore.password", None)
        return
    if kind == "PKCS12":
        return  # librdkafka reads ssl.keystore.location / ssl.keystore.password itself
    if kind == "PEM":  # one file with the private key and the certificate chain
        del conf["ssl.keystore.location"]
        conf.pop("ssl.keystore.password", None)
        conf["ssl.certificate.location"] = conf["ssl.key.location"] = location
    elif kind == "JKS":
        raise ClientSettingError("ssl.keystore.location", _JKS_HINT.format(key="ssl.keystore.type"))
    else:
        raise ClientSettingError("ssl.keystore.type", f"{kind} is not supported: use PEM or PKCS12")


def librdkafka_settings(java: Mapping[str, str]) -> dict[str, str]:
    """``java`` (Kafka Java client names, librdkafka names passed through) as librdkafka settings."""
    conf = {k: v for k, v in java.items() if k not in JAVA_ONLY}
    if "sasl.mechanism" in conf:
        conf["sasl.mechanisms"] = conf.pop("sasl.mechanism")
    jaas = conf.pop("sasl.jaas.config", None)
    if jaas:
        conf.update(_from_jaas(jaas))
    _trust_store(conf)
    _key_store(conf)
    if conf.get("ssl.endpoint.identification.algorithm") == "":
        conf["ssl.endpoint.identification.algorithm"] = "none"
    return conf
