"""Render and lint deploy/helm/relay in process (helm-python-sdk: Helm's Go SDK in a bundled library, no helm
binary, no cluster, no network) and pick the rendered objects apart."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "relay"
# Every secret value is unique, so a test can look for each of them anywhere in the output.
SECRETS = {"databaseUrl": "postgresql://relay:pg-pass-7f3a@pg.example:5432/relay",
           "brokerUrl": "amqp://relay:mq-pass-91c2@mq.example:5672/relay",
           "adminToken": "admin-token-5d1e8b2c9a7f4e60", "secretKey": "secret-key-0b6f3c8d2e9a1f47",
           "metricsToken": "metrics-token-8e2f4a6c1b3d5e79",
           "extra": {"OPENAI_API_KEY": "sk-provider-key-4c8e2a"}}
BASE = {"secrets": SECRETS}
SHARED = {"payloads": {"shared": {"enabled": True}}, "api": {"replicas": 2}, "worker": {"replicas": 3}}
AUTOSCALING = {"payloads": {"shared": {"enabled": True}},
               "api": {"autoscaling": {"enabled": True}, "podDisruptionBudget": {"enabled": True}},
               "worker": {"autoscaling": {"enabled": True, "maxReplicas": 20},
                          "podDisruptionBudget": {"enabled": True}}}
S3 = {"payloads": {"s3": {"enabled": True, "bucket": "relay-payloads", "endpointUrl": "http://minio.storage:9000",
                          "prefix": "prod/", "credentialsSecret": "relay-s3"}},
      "api": {"replicas": 2}, "worker": {"replicas": 3}}
EXISTING_SECRET = {"secrets": {"existingSecret": "relay-prod"}}
CATALOG = {"hosts": [{"name": "openai", "base_url": "https://api.openai.com",
                      "keys": [{"name": "openai-1", "value_env": "OPENAI_API_KEY"}]}],
           "models": [{"name": "gpt-4o-mini", "bindings": [{"host": "openai", "adapter": "openai",
                                                            "upstream_model": "gpt-4o-mini"}]}],
           "policies": [{"name": "default", "models": ["*"], "key_pool": ["openai-1"]}]}
EVERYTHING = {**SHARED, "ingress": {"enabled": True, "className": "nginx"}, "serviceMonitor": {"enabled": True},
              "catalog": {"enabled": True, "spec": CATALOG}, "config": {"queueType": "quorum"},
              "retention": {"enabled": True}}
def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Values layered like repeated -f files: later maps win key by key."""
    out: dict[str, Any] = {}
    for layer in layers:
        _merge(out, copy.deepcopy(layer))
    return out


def _merge(into: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


# The value sets the tests render: the defaults (plus the connection secrets they require), a shared RWX
# volume, payloads in a bucket, autoscaling, an existing Secret, and every optional part on.
VALUE_SETS = {
    "defaults": BASE,
    "shared-rwx": merged(BASE, SHARED),
    "s3": merged(BASE, S3),
    "autoscaling": merged(BASE, AUTOSCALING),
    "existing-secret": EXISTING_SECRET,
    "everything-on": merged(BASE, EVERYTHING),
}


@dataclass
class Rendered:
    objects: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def named(self, kind: str, suffix: str) -> dict[str, Any]:
        """The one KIND whose name ends with SUFFIX."""
        [found] = [o for o in self.of_kind(kind) if o["metadata"]["name"].endswith(suffix)]
        return found


def render(values: dict[str, Any], *, release: str = "rl") -> Rendered:
    """Render the chart as `helm install` would (schema checked), every YAML document parsed."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values, name=release, namespace="relay", is_install=True)
    objects = [doc for name, text in sorted(files.items()) if not name.endswith("NOTES.txt")
               for doc in yaml.safe_load_all(text) if doc]
    notes = next((text for name, text in files.items() if name.endswith("NOTES.txt")), "")
    return Rendered(objects=objects, notes=notes)


def lint(values: dict[str, Any]) -> list[Any]:
    """`helm lint --strict` errors and findings worse than INFO (it says INFO "icon is recommended": no icon)."""
    report = helm.lint(CHART, values, strict=True)
    return [*report["errors"], *(m for m in report["messages"] if m["severity"] >= 2)]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a Deployment, a Job or a CronJob."""
    spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
    return spec["template"]["spec"]  # type: ignore[no-any-return]


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in pod_spec(obj)["containers"] if c["name"] == name]
    return found


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    """A container's env: plain values as strings, secret references as ('secret', name, key)."""
    out: dict[str, Any] = {}
    for var in c.get("env", []):
        if "value" in var:
            out[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            out[var["name"]] = ("secret", ref["name"], ref["key"])
    return out


def payload_claim(deployment: dict[str, Any]) -> str | None:
    """The claim a Deployment mounts at RELAY_BATCH_PAYLOAD_DIR in every container; None for an emptyDir."""
    spec = pod_spec(deployment)
    [volume] = [v for v in spec["volumes"] if v["name"] == "payloads"]
    for c in spec["containers"]:
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["payloads"] == env_of(c)["RELAY_BATCH_PAYLOAD_DIR"], c["name"]
    claim = volume.get("persistentVolumeClaim", {}).get("claimName")
    assert claim or "emptyDir" in volume
    return claim
