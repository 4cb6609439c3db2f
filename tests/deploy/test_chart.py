"""The Helm chart (deploy/helm/toolbay): linted, rendered for several value sets, every
manifest validated strictly against the Kubernetes schemas of the oldest and the newest
version supported, and the invariants a deployment depends on asserted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.deployment import CHART, KUBE_VERSIONS, SECRETS, VALUE_SETS, render

pytestmark = pytest.mark.deploy_check

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is in requirements-dev.txt")
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate.utils", reason="kubernetes-validate is in requirements-dev.txt"
)


def _kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def _named(manifests: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    (found,) = [m for m in _kind(manifests, kind) if m["metadata"]["name"].endswith(suffix)]
    return found


def _pod_specs(manifests: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (m["metadata"]["name"], m["spec"]["template"]["spec"]) for m in manifests if m["kind"] in ("Deployment", "Job")
    ]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint_is_clean(name):
    report = helm.lint(CHART, VALUE_SETS[name], strict=True, kube_version=f"v{KUBE_VERSIONS[0]}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", VALUE_SETS)
def test_manifests_are_valid_kubernetes(name, version):
    """What `kubernetes-validate --strict -k VERSION` checks, in this process (a CLI start per
    file and version would cost more than the validation)."""
    problems = []
    for manifest in render(VALUE_SETS[name]):
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{manifest['kind']} {manifest['metadata']['name']}: {error.message} at {list(error.path)}")
    assert problems == [], "\n".join(problems)


def test_the_validator_is_strict():
    """An unknown field is an error, not ignored (the strict schemas)."""
    (web,) = [m for m in render(SECRETS) if m["metadata"]["name"].endswith("-web") and m["kind"] == "Deployment"]
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(web, KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_exactly_one_beat_and_a_worker_per_queue_entry(name):
    values = VALUE_SETS[name]
    manifests = render(values)
    commands = [c["command"] for _, spec in _pod_specs(manifests) for c in spec["containers"]]
    deployments = _kind(manifests, "Deployment")
    beats = [m for m in deployments if "beat" in m["spec"]["template"]["spec"]["containers"][0]["command"]]
    assert len(beats) == 1
    assert beats[0]["spec"]["replicas"] == 1 and beats[0]["spec"]["strategy"]["type"] == "Recreate"
    assert not any("--beat" in command or "-B" in command for command in commands)  # no worker embeds one
    workers = [c for c in commands if c[:3] == ["celery", "--app=mcp_platform", "worker"]]
    names = [arg.split("=", 1)[1] for c in workers for arg in c if arg.startswith("--hostname=")]
    expected = values.get("workers", [{"name": "short"}, {"name": "long"}])
    assert names == [f"{w['name']}@%h" for w in expected]  # distinct node names
    assert len(set(names)) == len(names)
    for command in ([c for c in commands if "audit_writer" in c], [c for c in commands if "listen_upstreams" in c]):
        assert len(command) == 1


@pytest.mark.parametrize("name", VALUE_SETS)
def test_web_probes_and_graceful_termination(name):
    manifests = render(VALUE_SETS[name])
    web = _named(manifests, "Deployment", "-web")
    spec = web["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        # The Host the probes send is always in ALLOWED_HOSTS (Django answers 400 otherwise).
        host = container[probe]["httpGet"]["httpHeaders"][0]
        assert host == {"name": "Host", "value": "localhost"}
        assert "localhost" in _env(container)["ALLOWED_HOSTS"].split(",")
    # X-Forwarded-* believed from TOOLBAY_TRUSTED_PROXIES only (uvicorn's default is 127.0.0.1).
    assert "--forwarded-allow-ips=$(TOOLBAY_TRUSTED_PROXIES)" in container["command"]
    assert "TOOLBAY_TRUSTED_PROXIES" in _env(container)
    graceful = [int(a.split("=")[1]) for a in container["command"] if a.startswith("--timeout-graceful-shutdown=")]
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert graceful and spec["terminationGracePeriodSeconds"] > pre_stop + graceful[0]
    assert web["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdbs = _kind(manifests, "PodDisruptionBudget")
    enabled = VALUE_SETS[name].get("web", {}).get("podDisruptionBudget", {}).get("enabled", True)
    assert len(pdbs) == (1 if enabled else 0)
    for pdb in pdbs:
        assert pdb["spec"]["selector"]["matchLabels"] == web["spec"]["selector"]["matchLabels"]
    hpas = _kind(manifests, "HorizontalPodAutoscaler")
    if VALUE_SETS[name].get("web", {}).get("autoscaling", {}).get("enabled"):
        assert hpas[0]["spec"]["scaleTargetRef"]["name"] == web["metadata"]["name"]
        assert "replicas" not in web["spec"]  # the HPA owns it
    else:
        assert hpas == []


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_pod_runs_as_the_images_user_on_a_read_only_root(name):
    manifests = render(VALUE_SETS[name])
    dockerfile = (CHART.parents[2] / "deploy" / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile
    specs = _pod_specs(manifests)
    assert len(specs) >= 6
    for resource, spec in specs:
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and (pod["runAsUser"], pod["runAsGroup"]) == (10001, 10001), resource
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, resource
            assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
            assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp"}
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("upgrade", [False, True], ids=["install", "upgrade"])
def test_migrations_run_as_a_hook_before_web_starts(upgrade):
    manifests = render(SECRETS, upgrade=upgrade)
    (job,) = _kind(manifests, "Job")
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert hooks == ["pre-install", "pre-upgrade"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    # What the Job needs exists before it: the Secret and the service account are hooks of a lower weight.
    weight = int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    for kind in ("Secret", "ServiceAccount"):
        (before,) = _kind(manifests, kind)
        assert before["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert int(before["metadata"]["annotations"]["helm.sh/hook-weight"]) < weight


def test_ingress_carries_the_sse_settings():
    manifests = render(VALUE_SETS["production"])
    (ingress,) = _kind(manifests, "Ingress")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    assert annotations["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert ingress["spec"]["tls"] == [{"hosts": ["toolbay.example.com"], "secretName": "toolbay-tls"}]
    (service,) = _kind(manifests, "Service")
    assert "sessionAffinity" not in service["spec"]  # any pod serves any session
    assert _kind(render(SECRETS), "Ingress") == []  # off by default


def test_secrets_are_referenced_or_created():
    made = render(SECRETS)
    (secret,) = _kind(made, "Secret")
    assert set(secret["stringData"]) == {"SECRET_KEY", "TOOLBAY_SECRET_KEYS", "DATABASE_URL", "REDIS_URL"}
    existing = render(VALUE_SETS["production"])
    assert _kind(existing, "Secret") == []
    for manifests, name in ((made, secret["metadata"]["name"]), (existing, "toolbay-prod")):
        for _, spec in _pod_specs(manifests):
            assert spec["containers"][0]["envFrom"] == [{"secretRef": {"name": name}}]
    # No secret value is ever in a pod's plain environment.
    for _, spec in _pod_specs(existing):
        env = _env(spec["containers"][0])
        assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "TOOLBAY_SECRET_KEYS"} & set(env)
        assert env["DATABASE_PGBOUNCER"] == "1" and env["TOOLBAY_LONG_CALL_SECONDS"] == "60"
        tls = {"name": "tls", "mountPath": "/etc/toolbay/ca", "readOnly": True}
        assert tls in spec["containers"][0]["volumeMounts"]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({**SECRETS, "runAsUser": 0}, "runAsUser"),
        ({**SECRETS, "env": {"SECRET_KEY": "in plain sight"}}, "SECRET_KEY"),
        ({**SECRETS, "workers": [{"name": "x", "queues": ["celery"]}]}, "workers"),
        ({**SECRETS, "redis": {"url": "redis-sentinel://s:26379"}}, "redis"),
        ({**SECRETS, "webb": {}}, "webb"),
    ],
    ids=["root", "secret-in-env", "unknown-queue", "sentinel-url", "typo"],
)
def test_schema_refuses_bad_values(values, complaint):
    with pytest.raises(helm.HelmError, match=complaint):
        render(values)


def test_missing_secrets_are_named():
    with pytest.raises(helm.HelmError, match=r"secrets\.secretKey, secrets\.fernetKeys, database\.url, redis\.url"):
        render({})


@pytest.mark.parametrize(
    ("sandbox", "seccomp", "apparmor", "optout"),
    [
        ({}, "Unconfined", "unconfined", False),
        ({"userNamespace": True}, "Unconfined", "unconfined", False),
        ({"enabled": False, "optOut": True}, "RuntimeDefault", "runtime/default", True),
    ],
    ids=["bubblewrap", "user-namespace", "opted-out"],
)
def test_only_the_runner_is_unconfined_for_bubblewrap(sandbox, seccomp, apparmor, optout):
    values = {**SECRETS, "packagedRunner": {"sandbox": sandbox}}
    manifests = render(values)
    for version in KUBE_VERSIONS:
        for manifest in manifests:
            kubernetes_validate.validate(manifest, version, strict=True)
    runner = _named(manifests, "Deployment", "-runner")["spec"]["template"]
    (container,) = runner["spec"]["containers"]
    security = container["securityContext"]
    # Whatever the sandbox needs, the runner gains no privilege: no capability, no escalation.
    assert security["capabilities"]["drop"] == ["ALL"] and security["allowPrivilegeEscalation"] is False
    assert security.get("seccompProfile", runner["spec"]["securityContext"]["seccompProfile"])["type"] == seccomp
    assert runner["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/runner"] == apparmor
    assert ("TOOLBAY_SANDBOX_OPTOUT" in _env(container)) is optout
    user_namespace = sandbox.get("userNamespace", False)
    assert (runner["spec"].get("hostUsers") is False, security.get("procMount")) == (
        (True, "Unmasked") if user_namespace else (False, None)
    )
    for name, spec in _pod_specs(manifests):
        if not name.endswith("-runner"):
            assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
            for other in spec["containers"]:
                assert "seccompProfile" not in other["securityContext"] and "TOOLBAY_SANDBOX_OPTOUT" not in _env(other)
