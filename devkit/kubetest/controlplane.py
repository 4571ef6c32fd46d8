"""A real etcd + kube-apiserver on loopback, started the way envtest does, for integration tests.

There is no kubelet, scheduler or controller-manager: objects are stored and validated (schemas,
CEL rules, RBAC, admission) but nothing reconciles them. Namespaces therefore never finish
terminating and no default ServiceAccount appears; create what a test needs explicitly.

Both processes run in their own session and get SIGKILL when the thread that started them dies
(``PR_SET_PDEATHSIG``), so a crashed test run leaves no orphans. Start them from a long-lived thread
(the pytest main thread), not from a short-lived worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import yaml

from cdcoperator.local.children import start_bound, stop_group
from cdcoperator.local.ports import free_port as free_port  # re-exported: tests import it from here
from kubetest import pki
from kubetest.binaries import KubeBinaries, find_binaries, kube_home

if TYPE_CHECKING:
    import kopf
    from kubernetes.client import ApiClient

ADMIN_USER = "kubetest-admin"
RESTRICTED_USER = "operator-user"
# A documentation-range address: the apiserver insists on a non-loopback advertise address and
# cannot detect one on a machine without a default route; nothing ever connects to it.
ADVERTISE_ADDRESS = "192.0.2.1"
SERVICE_CIDR = "10.0.0.0/24"




class KubeControlPlane:
    """etcd + kube-apiserver in a private work directory, with an admin and restricted users.

    Users: ``ADMIN_USER`` (group ``system:masters``) plus every entry of ``users`` (name -> groups;
    by default ``operator-user`` in no groups, whose rights come only from RBAC objects a test
    creates). They authenticate with static bearer tokens (``token_for``). Further identities can be
    had at any time as client certificates (``client_certificate``) or bound ServiceAccount tokens
    (``service_account_token``).
    """

    def __init__(
        self,
        home: Path | None = None,
        workdir: Path | None = None,
        users: Mapping[str, Sequence[str]] | None = None,
        extra_apiserver_args: Sequence[str] = (),
    ) -> None:
        self.binaries: KubeBinaries = find_binaries(home or kube_home())
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="shardcdc-kube-"))
        self.pki_dir = self.workdir / "pki"
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.extra_apiserver_args = list(extra_apiserver_args)
        self._users: dict[str, tuple[str, ...]] = {ADMIN_USER: ("system:masters",)}
        for name, groups in (users if users is not None else {RESTRICTED_USER: ()}).items():
            self._users[name] = tuple(groups)
        self._tokens = {name: secrets.token_hex(16) for name in self._users}
        self._ca: pki.CertificateAuthority | None = None
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None

    # --- addresses and credentials ------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_path(self) -> Path:
        """The CA that signed the serving certificate (and accepted client certificates)."""
        return self.pki_dir / "ca.crt"

    @property
    def kubeconfig_path(self) -> Path:
        """An admin kubeconfig (``system:masters``)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def admin_token(self) -> str:
        return self._tokens[ADMIN_USER]

    def token_for(self, user: str) -> str:
        """The static bearer token of a user declared at construction."""
        return self._tokens[user]

    @property
    def pids(self) -> tuple[int, int]:
        """(etcd, kube-apiserver) process ids while running."""
        assert self._etcd is not None and self._apiserver is not None, "not running"
        return self._etcd.pid, self._apiserver.pid

    @property
    def running(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self._etcd, self._apiserver))

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        """Start etcd and kube-apiserver; return once ``/readyz`` passes and ``default`` exists."""
        if self.running:
            return
        began = time.monotonic()
        self._write_credentials()
        (self.workdir / "etcd").mkdir(exist_ok=True)
        self._etcd = self._spawn("etcd", [str(self.binaries.etcd), *self._etcd_args()])
        # No need to wait for etcd first: the apiserver retries its storage until it answers.
        self._apiserver = self._spawn(
            "kube-apiserver", [str(self.binaries.kube_apiserver), *self._apiserver_args()]
        )
        try:
            self._wait_ready(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def stop(self, timeout: float = 10.0) -> None:
        """Stop kube-apiserver, then etcd (SIGTERM, SIGKILL after ``timeout``); idempotent."""
        for attr in ("_apiserver", "_etcd"):
            proc: subprocess.Popen[bytes] | None = getattr(self, attr)
            if proc is not None:
                _terminate_group(proc, timeout)
                setattr(self, attr, None)

    def close(self) -> None:
        """Stop both processes and remove a work directory we created."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KubeControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- clients ------------------------------------------------------------------------------

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """``os.environ`` with ``KUBECONFIG`` pointing here (for kopf, kubectl, subprocesses)."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig_path)
        return env

    def connection_info(self, token: str | None = None) -> kopf.ConnectionInfo:
        """kopf credentials for the admin (or a bearer ``token``): return it from an ``@kopf.on.login``."""
        import kopf

        return kopf.ConnectionInfo(
            server=self.server,
            ca_path=str(self.ca_path),
            token=token or self.admin_token,
            default_namespace="default",
        )

    @contextlib.contextmanager
    def kubeconfig_env(self, kubeconfig: Path | None = None) -> Iterator[Path]:
        """Point ``KUBECONFIG`` in this process at the plane, for kopf and ``kubernetes.config``.

        ``kubernetes.config`` reads ``$KUBECONFIG`` once, at import time, into
        ``KUBE_CONFIG_DEFAULT_LOCATION``; kopf's default login (``login_via_client``) relies on that
        constant, so it is redirected too (and restored afterwards) if the module is loaded.
        """
        path = str(kubeconfig or self.kubeconfig_path)
        modules = [sys.modules.get(n) for n in ("kubernetes.config.kube_config", "kubernetes.config")]
        patched = [m for m in modules if m is not None and hasattr(m, "KUBE_CONFIG_DEFAULT_LOCATION")]
        saved_modules = [vars(m)["KUBE_CONFIG_DEFAULT_LOCATION"] for m in patched]
        saved_env = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = path
        for module in patched:
            vars(module)["KUBE_CONFIG_DEFAULT_LOCATION"] = path
        try:
            yield Path(path)
        finally:
            for module, value in zip(patched, saved_modules, strict=True):
                vars(module)["KUBE_CONFIG_DEFAULT_LOCATION"] = value
            if saved_env is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = saved_env

    def ensure_namespace(self, name: str) -> None:
        """Create a namespace unless it exists (the control plane is shared by every test module)."""
        if self.kubectl("get", "namespace", name).returncode != 0:
            self.kubectl("create", "namespace", name, check=True)

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Wait until each CRD (``name.group``) is Established and its objects can be listed.

        Not ``kubectl wait --for=condition=Established``: right after the create, the CRD may have no
        ``status.conditions`` yet, and kubectl then fails at once ("conditions accessor error: <nil>")
        instead of waiting. Established is not enough either: the resource's storage then answers
        429 "storage is (re)initializing" for a while, and a kopf operator started meanwhile waits
        out a 1 s retry before its first event (a second on bench/operator_scale.py's first run).
        """
        deadline = time.monotonic() + timeout
        for crd in crds:
            for args in (("get", f"crd/{crd}", "-o", 'jsonpath={.status.conditions[?(@.type=="Established")].status}'),
                         ("get", crd, "--all-namespaces", "-o", "name")):
                while True:
                    r = self.kubectl(*args)
                    if r.returncode == 0 and (args[1] == crd or r.stdout.strip() == "True"):
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"CRD {crd} not Established and listable within {timeout}s: "
                                           f"{r.stdout}{r.stderr}")
                    time.sleep(0.1)  # polling interval of a condition with a deadline

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = False,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as the admin (or with ``kubeconfig``); output captured as text."""
        cmd = [
            str(self.binaries.kubectl),
            f"--kubeconfig={kubeconfig or self.kubeconfig_path}",
            # A private discovery cache: a shared ~/.kube/cache could go stale across CRD changes.
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        return subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            env=self.env(kubeconfig),
        )

    def write_kubeconfig(
        self,
        path: Path,
        *,
        user: str,
        token: str | None = None,
        client_cert: tuple[Path, Path] | None = None,
        namespace: str = "default",
    ) -> Path:
        """A kubeconfig for this server authenticating with ``token`` or a ``(cert, key)`` pair."""
        creds: dict[str, str] = {}
        if token is not None:
            creds["token"] = token
        if client_cert is not None:
            creds["client-certificate"] = str(client_cert[0])
            creds["client-key"] = str(client_cert[1])
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubetest",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": user, "user": creds}],
            "contexts": [
                {"name": user, "context": {"cluster": "kubetest", "user": user, "namespace": namespace}}
            ],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig for a static-token user declared at construction."""
        return self.write_kubeconfig(
            self.workdir / f"{user}.kubeconfig", user=user, token=self.token_for(user)
        )

    def api_client(self, kubeconfig: Path | None = None) -> ApiClient:
        """A ``kubernetes`` client for the admin, or for whoever ``kubeconfig`` authenticates."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig_path))

    def user_api_client(self, user: str) -> ApiClient:
        """A ``kubernetes`` client for a static-token user (e.g. ``RESTRICTED_USER``)."""
        return self.api_client(self.kubeconfig_for(user))

    def client_certificate(self, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
        """Mint a client certificate for any identity, usable without restarting the server."""
        assert self._ca is not None, "start() first"
        pair = self._ca.issue_client(user, tuple(groups))
        stem = self.pki_dir / f"user-{secrets.token_hex(4)}-{user.replace(':', '_')}"
        cert, key = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        key.chmod(0o600)
        return cert, key

    def service_account_token(self, namespace: str, name: str, expiration_seconds: int = 3600) -> str:
        """A bound token (TokenRequest API) for ServiceAccount ``namespace/name``, created if missing.

        This is the identity an in-cluster operator has, so RBAC tests can use the real thing.
        """
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            try:
                core.create_namespaced_service_account(
                    namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
            # No audiences: the token is for the apiserver itself (its --api-audiences, the issuer).
            spec = client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
            request = core.create_namespaced_service_account_token(
                name, namespace, client.AuthenticationV1TokenRequest(spec=spec)
            )
        if request.status is None:
            raise RuntimeError(f"TokenRequest for {namespace}/{name} returned no status")
        return str(request.status.token)

    # --- internals ----------------------------------------------------------------------------

    def _write_credentials(self) -> None:
        if self._ca is not None:
            return  # a restart keeps certificates and SA keys, so minted tokens stay valid
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self._ca = pki.new_ca()
        serving = self._ca.issue_server("kube-apiserver", ["127.0.0.1", "localhost", ADVERTISE_ADDRESS])
        sa = pki.service_account_keys()
        files = {
            "ca.crt": self._ca.cert_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "sa.pub": sa.cert_pem,
            "sa.key": sa.key_pem,
            "tokens.csv": _token_file(self._tokens, self._users).encode(),
        }
        for name, data in files.items():
            (self.pki_dir / name).write_bytes(data)
        for secret in ("apiserver.key", "sa.key", "tokens.csv"):
            (self.pki_dir / secret).chmod(0o600)
        self.write_kubeconfig(self.kubeconfig_path, user=ADMIN_USER, token=self.admin_token)

    def _etcd_args(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            # Test data is disposable; fsync per write costs more than the whole test otherwise.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        p = self.pki_dir
        return [
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={p}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            f"--token-auth-file={p / 'tokens.csv'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--advertise-address={ADVERTISE_ADDRESS}",
            # No Endpoints for the kubernetes Service: the advertise address above is fake.
            "--endpoint-reconciler-type=none",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # Without a controller-manager no ServiceAccount token controller exists to satisfy it.
            "--disable-admission-plugins=ServiceAccount",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--profiling=false",
            *self.extra_apiserver_args,
        ]

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        with (self.workdir / f"{name}.log").open("ab") as log:
            return start_bound(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
            )

    def _wait_ready(self, deadline: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_path))
        # No proxies: loopback must never be routed through an HTTP(S)_PROXY from the environment.
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        last = "no answer yet"
        # /readyz covers etcd and the post-start hooks (RBAC bootstrap roles, priority classes...);
        # the default namespace is created by a controller loop right after, so wait for it too.
        for path in ("/readyz", "/api/v1/namespaces/default"):
            while True:
                for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver)):
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(
                            f"{name} exited with {proc.returncode} during start-up:\n{self._tail(name)}"
                        )
                try:
                    with opener.open(
                        urllib.request.Request(self.server + path, headers=headers), timeout=5
                    ) as resp:
                        if resp.status == 200:
                            break
                        last = f"{path}: HTTP {resp.status}"
                except urllib.error.HTTPError as exc:
                    last = f"{path}: HTTP {exc.code} {exc.read()[:500].decode(errors='replace')}"
                except (OSError, ssl.SSLError) as exc:
                    last = f"{path}: {exc}"
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kube-apiserver not ready: {last}\n{self._tail('kube-apiserver')}")
                # Polling interval, not synchronisation: the loop ends on the condition above.
                time.sleep(0.1)

    def _tail(self, name: str, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            text = (self.workdir / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""


def _token_file(tokens: Mapping[str, str], users: Mapping[str, Sequence[str]]) -> str:
    """kube-apiserver's static token CSV: ``token,user,uid[,"group1,group2"]`` per line."""
    rows = []
    for uid, (user, groups) in enumerate(users.items(), start=1):
        row = f"{tokens[user]},{user},{uid}"
        if groups:
            row += "," + json.dumps(",".join(groups))
        rows.append(row + "\n")
    return "".join(rows)


def _terminate_group(proc: subprocess.Popen[bytes], timeout: float) -> None:
    stop_group(proc, timeout)
