"""What the deployment checks share: where deploy/ lives, the Kubernetes versions and value
sets the chart is rendered for, the rendering itself, and the Procfile's process list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "toolbay"
VENV_BIN = ROOT / ".venv" / "bin"
# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion; the oldest schemas
# kubernetes-validate ships) and the newest it ships.
KUBE_VERSIONS = ("1.25.0", "1.37.0")

SECRETS = {
    "secrets": {"secretKey": "k" * 50, "fernetKeys": "x" * 43 + "="},
    "database": {"url": "postgres://toolbay:pw@db.example.com:5432/toolbay?sslmode=verify-full"},
    "redis": {"url": "rediss://:pw@redis.example.com:6380/0?ssl_cert_reqs=required"},
}
# The value sets every check runs on: the defaults (the chart makes the Secret), a
# production-like one (an existing Secret, ingress with TLS, HPA, TLS files, PgBouncer, more
# workers), and a small one (no PDB, no service account, one worker for both queues).
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": SECRETS,
    "production": {
        "secrets": {"existingSecret": "toolbay-prod"},
        "image": {"repository": "registry.example.com/toolbay", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
        "database": {"pgbouncer": True, "connMaxAge": 0},
        "tlsSecret": "toolbay-ca",
        "allowedHosts": ["toolbay.example.com"],
        "publicUrl": "https://toolbay.example.com",
        "trustedProxies": "10.244.0.0/16",
        "env": {"TOOLBAY_LONG_CALL_SECONDS": "60", "MCP_SSE_KEEPALIVE_SECONDS": 10},
        "web": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 12}},
        "workers": [
            {
                "name": "short",
                "queues": ["toolbay.short"],
                "replicas": 4,
                "concurrency": 8,
                "terminationGracePeriodSeconds": 60,
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
            },
            {
                "name": "long",
                "queues": ["toolbay.long"],
                "replicas": 2,
                "concurrency": 2,
                "terminationGracePeriodSeconds": 900,
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
            },
            {
                "name": "both",
                "queues": ["toolbay.short", "toolbay.long"],
                "replicas": 1,
                "concurrency": 4,
                "terminationGracePeriodSeconds": 300,
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
            },
        ],
        "auditWriter": {"replicas": 2},
        "upstreamListener": {"replicas": 2},
        "ingress": {
            "enabled": True,
            "host": "toolbay.example.com",
            "tlsSecret": "toolbay-tls",
            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        },
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "podAnnotations": {"prometheus.io/scrape": "true"},
    },
    "small": {
        **SECRETS,
        "serviceAccount": {"create": False},
        "web": {"replicas": 1, "podDisruptionBudget": {"enabled": False}},
        "workers": [
            {
                "name": "all",
                "queues": ["toolbay.short", "toolbay.long"],
                "replicas": 1,
                "concurrency": 2,
                "terminationGracePeriodSeconds": 120,
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
            }
        ],
        "ingress": {"enabled": True, "className": ""},
    },
}


_rendered: dict[tuple[str, bool], str] = {}


def render(values: dict[str, Any], *, upgrade: bool = False) -> list[dict[str, Any]]:
    """The chart's manifests for ``values``, as Helm would install (or upgrade) them (each
    value set is rendered once per run; every caller gets its own copy)."""
    import helm_python as helm

    key = (json.dumps(values, sort_keys=True), upgrade)
    if key not in _rendered:
        chart = helm.Chart.load(CHART)
        rendered = chart.render(
            values,
            name="tb",
            namespace="toolbay",
            is_install=not upgrade,
            is_upgrade=upgrade,
            revision=2 if upgrade else 1,
        )
        _rendered[key] = "\n---\n".join(text for path, text in sorted(rendered.items()) if path.endswith(".yaml"))
    return [doc for doc in yaml.safe_load_all(_rendered[key]) if doc]


def procfile() -> dict[str, str]:
    """deploy/Procfile's processes: name -> command, as a process manager reads them."""
    entries = {}
    for line in (ROOT / "deploy" / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split(":", 1)
            entries[name.strip()] = command.strip()
    return entries
