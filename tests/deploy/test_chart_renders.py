"""deploy/helm/relay renders, lints strictly and validates against the Kubernetes schemas for every value set,
and its values.schema.json rejects values of the wrong type, all without a helm binary or a cluster."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from app.cli import build_parser
from app.settings import Settings
from tests.deploy.chart import BASE, CHART, VALUE_SETS, env_of, lint, merged, pod_spec, render

# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_value_set_lints_clean_in_strict_mode(name: str) -> None:
    assert lint(VALUE_SETS[name]) == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_manifest_is_valid_against_the_kubernetes_schemas(name: str) -> None:
    rendered = render(VALUE_SETS[name])
    kinds = {o["kind"] for o in rendered.objects}
    assert {"Deployment", "Job"} <= kinds
    for obj in rendered.objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: no schema offline; test_chart_properties checks what it selects
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_a_validation_error_is_really_raised_for_a_broken_manifest() -> None:
    """The check above can fail: a Deployment with a string replica count is refused."""
    deployment = render(BASE).of_kind("Deployment")[0]
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("bad", [
    {"api": {"replicas": "3"}},
    {"worker": {"threads": 2.5}},
    {"worker": {"terminationGraceMarginSeconds": 10}},
    {"config": {"batchItemTimeLimitSeconds": "300"}},
    {"config": {"queueType": "stream"}},
    {"payloads": {"shared": {"enabled": "yes"}}},
    {"api": {"autoscaling": {"enabled": True, "targetCPUUtilizationPercentage": 150}}},
    {"secrets": {"adminToken": "short"}},
    {"secrets": {"brokerUrl": "redis://cache:6379"}},
    {"ingress": {"hosts": "relay.example.com"}},
    {"config": {"extraEnv": {"RELAY_BATCH_MAX_ITEMS": 50000}}},
    {"replicaCount": 3},
    {"retention": {"usageBefore": "2026-01-31"}},  # an age only: a fixed date would purge nothing after a while
    {"retention": {"schedule": ""}},
], ids=repr)
def test_values_of_the_wrong_type_or_shape_are_rejected_by_the_schema(bad: dict[str, Any]) -> None:
    values = merged(BASE, bad)
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
    assert lint(values), "lint accepts what the schema refuses"


def test_the_connection_secrets_are_required_unless_an_existing_secret_holds_them() -> None:
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError, match="databaseUrl"):
            chart.validate_schema({})
        chart.validate_schema({"secrets": {"existingSecret": "relay-prod"}})


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_container_runs_a_relay_command_the_cli_accepts_with_settings_it_accepts(name: str) -> None:
    secret_values = {"RELAY_DATABASE_URL": "postgresql://u@h/db", "RELAY_BROKER_URL": "amqp://u@h/v",
                     "RELAY_ADMIN_TOKEN": "a" * 16, "RELAY_SECRET_KEY": "s" * 16}
    for obj in render(VALUE_SETS[name]).objects:
        if obj["kind"] not in ("Deployment", "Job", "CronJob"):
            continue
        for c in pod_spec(obj)["containers"] + pod_spec(obj).get("initContainers", []):
            assert c["command"][0] == "relay"
            build_parser().parse_args(c["command"][1:])  # exits (SystemExit) on an unknown option
            env = {k: v for k, v in env_of(c).items() if isinstance(v, str)}
            Settings.from_env({**secret_values, **env})
