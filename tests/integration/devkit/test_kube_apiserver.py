"""The envtest-style control plane: a real kube-apiserver + etcd, driven by kubectl and the python client.

Needs the binaries from ``make kube``; without them every test errors with that instruction (no skip).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kopf
import pytest
from kopf.testing import KopfRunner
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetest import (
    ADMIN_USER,
    DEFAULT_VERSION,
    RESTRICTED_USER,
    KubeControlPlane,
    MissingBinariesError,
    find_binaries,
    kube_control_plane_fixture,
)

GROUP = "kubetest.shardcdc.io"
CEL_MESSAGE = "replicas must not exceed maxReplicas"

# A namespaced CRD with a CEL rule across two fields and an immutability (transition) rule.
WIDGET_CRD = f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.{GROUP}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [wdg]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
          spec:
            type: object
            required: [replicas, maxReplicas, color]
            x-kubernetes-validations:
            - rule: self.replicas <= self.maxReplicas
              message: {CEL_MESSAGE}
            properties:
              replicas: {{type: integer, minimum: 0}}
              maxReplicas: {{type: integer}}
              color:
                type: string
                x-kubernetes-validations:
                - rule: self == oldSelf
                  message: color is immutable
"""


def widget(name: str, replicas: int, max_replicas: int, color: str = "blue") -> str:
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "maxReplicas": max_replicas, "color": color},
        }
    )


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeControlPlane]:
    yield from kube_control_plane_fixture()


@pytest.fixture(scope="module")
def widget_crd(kube: KubeControlPlane) -> str:
    applied = kube.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == f"customresourcedefinition.apiextensions.k8s.io/widgets.{GROUP} created\n"
    kube.wait_established(f"widgets.{GROUP}", timeout=30)
    return f"widgets.{GROUP}"


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` (RBAC changes reach the authorizer through an informer, asynchronously)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_missing_binaries_name_the_make_target(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "etcd").write_text("")
    with pytest.raises(MissingBinariesError) as exc:
        find_binaries(tmp_path)
    assert str(exc.value) == (
        f"kube-apiserver/etcd/kubectl not built in {tmp_path / 'bin'} (missing: kube-apiserver, etcd, kubectl): "
        "run `make kube` first (builds them from pinned sources through the Go module proxy)"
    )


def test_server_version_and_start_time(kube: KubeControlPlane) -> None:
    version = kube.kubectl("version", "-o", "json")
    assert version.returncode == 0, version.stderr
    doc = json.loads(version.stdout)
    assert doc["serverVersion"]["gitVersion"] == DEFAULT_VERSION
    assert doc["clientVersion"]["gitVersion"] == DEFAULT_VERSION
    assert kube.start_seconds is not None and kube.start_seconds < 60
    who = kube.kubectl(
        "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"
    )
    assert who.returncode == 0, who.stderr
    assert who.stdout == f'{ADMIN_USER} ["system:masters","system:authenticated"]'


def test_cel_rule_rejects_invalid_widget(kube: KubeControlPlane, widget_crd: str) -> None:
    bad = kube.kubectl("apply", "-f", "-", input=widget("too-many", replicas=5, max_replicas=3))
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert f'The Widget "too-many" is invalid: spec: Invalid value: "object": {CEL_MESSAGE}' in bad.stderr, (
        bad.stderr
    )
    missing = kube.kubectl("get", "widgets", "too-many", "--ignore-not-found", "-o", "name")
    assert (missing.returncode, missing.stdout) == (0, "")


def test_valid_widget_created_and_transition_rule_enforced(kube: KubeControlPlane, widget_crd: str) -> None:
    good = kube.kubectl("apply", "-f", "-", input=widget("fine", replicas=2, max_replicas=3))
    assert good.returncode == 0, good.stderr
    assert good.stdout == f"widget.{GROUP}/fine created\n"
    got = kube.kubectl("get", "wdg", "fine", "-o", "json")
    assert json.loads(got.stdout)["spec"] == {"replicas": 2, "maxReplicas": 3, "color": "blue"}

    recolor = kube.kubectl("apply", "-f", "-", input=widget("fine", replicas=2, max_replicas=3, color="red"))
    assert recolor.returncode == 1
    assert (
        'The Widget "fine" is invalid: spec.color: Invalid value: "string": color is immutable'
        in recolor.stderr
    )
    deleted = kube.kubectl("delete", "widget", "fine")
    assert (deleted.returncode, deleted.stdout) == (0, f'widget.{GROUP} "fine" deleted\n')


def test_configmap_lifecycle_with_python_client(kube: KubeControlPlane) -> None:
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        created = core.create_namespaced_config_map(
            "default", {"metadata": {"name": "cm-lifecycle"}, "data": {"a": "1", "b": "two"}}
        )
        assert created.metadata.name == "cm-lifecycle"
        read = core.read_namespaced_config_map("cm-lifecycle", "default")
        assert read.data == {"a": "1", "b": "two"}
        assert read.metadata.uid == created.metadata.uid
        core.delete_namespaced_config_map("cm-lifecycle", "default")
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_config_map("cm-lifecycle", "default")
        assert gone.value.status == 404


def test_restricted_user_gets_only_what_rbac_grants(kube: KubeControlPlane) -> None:
    ns = "rbac-test"
    with kube.api_client() as admin_api:
        core = client.CoreV1Api(admin_api)
        rbac = client.RbacAuthorizationV1Api(admin_api)
        core.create_namespace({"metadata": {"name": ns}})
        core.create_namespaced_config_map(ns, {"metadata": {"name": "visible"}, "data": {"k": "v"}})

        with kube.user_api_client(RESTRICTED_USER) as user_api:
            user_core = client.CoreV1Api(user_api)
            review = client.AuthenticationV1Api(user_api).create_self_subject_review({})
            assert review.status.user_info.username == RESTRICTED_USER
            assert review.status.user_info.groups == ["system:authenticated"]

            with pytest.raises(ApiException) as before:
                user_core.list_namespaced_config_map(ns)
            assert before.value.status == 403

            rbac.create_namespaced_role(
                ns,
                {
                    "metadata": {"name": "cm-reader"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
                },
            )
            rbac.create_namespaced_role_binding(
                ns,
                {
                    "metadata": {"name": "cm-reader"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RESTRICTED_USER}
                    ],
                },
            )

            def can_list() -> bool:
                try:
                    user_core.list_namespaced_config_map(ns)
                except ApiException as exc:
                    assert exc.status == 403
                    return False
                return True

            wait_until(can_list, what="the RoleBinding to take effect")
            names = [cm.metadata.name for cm in user_core.list_namespaced_config_map(ns).items]
            assert "visible" in names
            for denied in (
                lambda: user_core.create_namespaced_config_map(ns, {"metadata": {"name": "nope"}}),
                lambda: user_core.delete_namespaced_config_map("visible", ns),
                lambda: user_core.list_namespaced_config_map("default"),
                lambda: user_core.list_namespaced_secret(ns),
            ):
                with pytest.raises(ApiException) as exc:
                    denied()
                assert exc.value.status == 403

    user_kubeconfig = kube.kubeconfig_for(RESTRICTED_USER)
    for verb, resource, expected in (
        ("list", "configmaps", "yes"),
        ("create", "configmaps", "no"),
        ("get", "secrets", "no"),
    ):
        answer = kube.kubectl("auth", "can-i", verb, resource, "-n", ns, kubeconfig=user_kubeconfig)
        assert answer.stdout.strip() == expected, (verb, resource, answer.stderr)


def test_service_account_token_and_client_certificate_identities(
    kube: KubeControlPlane, tmp_path: Path
) -> None:
    token = kube.service_account_token("default", "shardcdc-operator")
    sa_config = kube.write_kubeconfig(tmp_path / "sa.kubeconfig", user="sa", token=token)
    who = kube.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=sa_config)
    assert (who.returncode, who.stdout) == (0, "system:serviceaccount:default:shardcdc-operator"), who.stderr
    denied = kube.kubectl("get", "configmaps", kubeconfig=sa_config)
    assert denied.returncode == 1
    assert (
        'configmaps is forbidden: User "system:serviceaccount:default:shardcdc-operator" cannot list resource'
        in denied.stderr
    )

    cert = kube.client_certificate("cert-user", ["team-a", "team-b"])
    cert_config = kube.write_kubeconfig(tmp_path / "cert.kubeconfig", user="cert-user", client_cert=cert)
    who = kube.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}", kubeconfig=cert_config)
    assert (who.returncode, who.stdout) == (0, '["team-a","team-b","system:authenticated"]'), who.stderr


def test_kopf_operator_runs_against_the_plane(kube: KubeControlPlane, widget_crd: str) -> None:
    """kopf (private registry, so nothing leaks into other tests) logs in and reconciles a Widget."""
    registry = kopf.OperatorRegistry()
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False

    @kopf.on.login(registry=registry, id="login")
    def login(**_: object) -> kopf.ConnectionInfo:
        return kube.connection_info()

    @kopf.on.create(GROUP, "v1", "widgets", registry=registry, id="created")
    def created(spec: kopf.Spec, patch: kopf.Patch, **_: object) -> None:
        patch.status["seen"] = spec["replicas"]

    def seen(objects: client.CustomObjectsApi) -> bool:
        obj = objects.get_namespaced_custom_object(GROUP, "v1", "default", "widgets", "kopf-widget")
        return bool(obj.get("status", {}).get("seen") == 3)

    # kopf's CLI makes a passed registry the process-wide default for good; put the previous one back,
    # or later KopfRunner(..., "-m", "cdcoperator.handlers") runs find no handlers (already imported).
    previous = kopf.get_default_registry()
    try:
        with (
            KopfRunner(["run", "--standalone", "-n", "default"], registry=registry, settings=settings) as runner,
            kube.api_client() as api,
        ):
            applied = kube.kubectl("apply", "-f", "-", input=widget("kopf-widget", replicas=3, max_replicas=4))
            assert applied.returncode == 0, applied.stderr
            objects = client.CustomObjectsApi(api)
            wait_until(lambda: seen(objects), timeout=30, what="kopf to write status.seen")
    finally:
        kopf.set_default_registry(previous)
    assert runner.exception is None
    assert runner.exit_code == 0
    assert "Activity 'login' succeeded." in runner.output
    assert "[default/kopf-widget] Handler 'created' succeeded." in runner.output


def test_kubeconfig_env_serves_kopf_default_login(kube: KubeControlPlane) -> None:
    """kopf's default login reads kubernetes.config's import-time KUBECONFIG; kubeconfig_env redirects it."""
    saved = client.Configuration.get_default_copy()
    try:
        with kube.kubeconfig_env() as path:
            assert os.environ["KUBECONFIG"] == str(path) == str(kube.kubeconfig_path)
            info = kopf.login_via_client(logger=logging.getLogger("test"), settings=kopf.OperatorSettings())
    finally:
        client.Configuration.set_default(saved)
    assert info is not None
    assert (info.server, info.token, info.ca_path) == (kube.server, kube.admin_token, str(kube.ca_path))
    assert os.environ.get("KUBECONFIG") != str(kube.kubeconfig_path)


_CHILD = """\
import sys
from kubetest import KubeControlPlane
plane = KubeControlPlane()
plane.start()
print(*plane.pids, plane.workdir, flush=True)
sys.stdin.read()
"""


def test_children_die_with_their_parent() -> None:
    """A test process killed with SIGKILL (no cleanup at all) must not leave etcd/apiserver behind."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None and parent.stderr is not None
    line = parent.stdout.readline()
    if not line:
        parent.kill()
        parent.wait()
        raise AssertionError(f"child failed to start a control plane:\n{parent.stderr.read()[-3000:]}")
    etcd_pid, apiserver_pid, workdir = line.split()
    pids = [int(etcd_pid), int(apiserver_pid)]
    assert all(_alive(pid) for pid in pids)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_until(lambda: not any(_alive(pid) for pid in pids), what="etcd and kube-apiserver to die")
    shutil.rmtree(workdir, ignore_errors=True)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
