"""What the chart promises: the payload directory (pod-local by default, one shared RWX claim when asked),
worker pods stopped gracefully, migrations and the catalog as hooks, secrets only in the Secret."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm
import pytest

from tests.deploy.chart import (
    AUTOSCALING,
    BASE,
    CATALOG,
    CHART,
    EXISTING_SECRET,
    S3,
    SECRETS,
    SHARED,
    VALUE_SETS,
    container,
    env_of,
    merged,
    payload_claim,
    pod_spec,
    render,
)

DOCKERFILE = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
WARNING = "WARNING: more than one API pod would run with a payload directory local to each pod"


def test_by_default_the_workers_run_beside_the_api_on_storage_local_to_the_pod() -> None:
    rendered = render(BASE)
    [api] = rendered.of_kind("Deployment")
    assert {c["name"] for c in pod_spec(api)["containers"]} == {"api", "worker"}
    assert payload_claim(api) is None
    assert rendered.of_kind("PersistentVolumeClaim") == []
    assert f"ENV RELAY_BATCH_PAYLOAD_DIR={env_of(container(api, 'api'))['RELAY_BATCH_PAYLOAD_DIR']}" in DOCKERFILE


@pytest.mark.parametrize(("values", "warned"), [
    ({}, False),
    ({"api": {"replicas": 2}}, True),
    ({"api": {"autoscaling": {"enabled": True}}}, True),
    (SHARED, False),
    (S3, False),
    (AUTOSCALING, False),
])
def test_notes_warn_exactly_when_more_than_one_pod_would_use_pod_local_storage(values: dict, warned: bool) -> None:
    assert (WARNING in render(merged(BASE, values)).notes) is warned


def test_with_a_shared_volume_api_and_workers_are_separate_deployments_mounting_one_rwx_claim() -> None:
    rendered = render(VALUE_SETS["shared-rwx"])
    api, worker = rendered.named("Deployment", "-api"), rendered.named("Deployment", "-worker")
    assert [c["name"] for c in pod_spec(api)["containers"]] == ["api"]
    assert [c["name"] for c in pod_spec(worker)["containers"]] == ["worker"]
    assert (api["spec"]["replicas"], worker["spec"]["replicas"]) == (2, 3)
    [claim] = rendered.of_kind("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert payload_claim(api) == payload_claim(worker) == claim["metadata"]["name"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_an_existing_claim_is_mounted_by_both_deployments_and_none_is_created() -> None:
    rendered = render(merged(BASE, {"payloads": {"shared": {"enabled": True, "existingClaim": "relay-nfs"}}}))
    assert rendered.of_kind("PersistentVolumeClaim") == []
    assert {payload_claim(d) for d in rendered.of_kind("Deployment")} == {"relay-nfs"}
    assert len(rendered.of_kind("Deployment")) == 2


def test_with_payloads_in_a_bucket_no_claim_is_used_and_every_container_gets_the_bucket_and_its_credentials() -> None:
    rendered = render(VALUE_SETS["s3"])
    api, worker = rendered.named("Deployment", "-api"), rendered.named("Deployment", "-worker")
    assert [c["name"] for c in pod_spec(api)["containers"]] == ["api"]
    assert [c["name"] for c in pod_spec(worker)["containers"]] == ["worker"]
    assert (api["spec"]["replicas"], worker["spec"]["replicas"]) == (2, 3)
    assert rendered.of_kind("PersistentVolumeClaim") == []
    assert payload_claim(api) is None and payload_claim(worker) is None  # an emptyDir: staging only
    for deployment, name in ((api, "api"), (worker, "worker")):
        env = env_of(container(deployment, name))
        assert {k: env[k] for k in ("RELAY_PAYLOAD_BACKEND", "RELAY_S3_BUCKET", "RELAY_S3_ENDPOINT_URL",
                                    "RELAY_S3_PREFIX")} == \
            {"RELAY_PAYLOAD_BACKEND": "s3", "RELAY_S3_BUCKET": "relay-payloads",
             "RELAY_S3_ENDPOINT_URL": "http://minio.storage:9000", "RELAY_S3_PREFIX": "prod/"}
        assert env["AWS_ACCESS_KEY_ID"] == ("secret", "relay-s3", "AWS_ACCESS_KEY_ID")
        assert env["AWS_SECRET_ACCESS_KEY"] == ("secret", "relay-s3", "AWS_SECRET_ACCESS_KEY")
    assert "in the bucket relay-payloads" in rendered.notes


def test_without_a_credentials_secret_the_sdk_chain_is_left_to_find_them() -> None:
    rendered = render(merged(BASE, {"payloads": {"s3": {"enabled": True, "bucket": "b"}}}))
    for deployment in rendered.of_kind("Deployment"):
        assert not any(k.startswith("AWS_") for c in pod_spec(deployment)["containers"] for k in env_of(c))


@pytest.mark.parametrize(("s3", "problem"), [
    ({"enabled": True}, "needs payloads.s3.bucket"),
    ({"enabled": True, "bucket": "b", "shared": True}, "choose one"),
])
def test_s3_mode_without_a_bucket_or_beside_a_shared_claim_is_refused(s3: dict, problem: str) -> None:
    shared = {"shared": {"enabled": True}} if s3.pop("shared", False) else {}
    with pytest.raises(Exception, match=problem):
        render(merged(BASE, {"payloads": {"s3": s3, **shared}}))


@pytest.mark.parametrize("values", [BASE, VALUE_SETS["shared-rwx"]], ids=["workers-in-api-pods", "worker-pods"])
@pytest.mark.parametrize("limit", [30, 300, 3600])
def test_pods_running_workers_get_at_least_the_item_time_limit_plus_40_s_to_stop(values: dict, limit: int) -> None:
    rendered = render(merged(values, {"config": {"batchItemTimeLimitSeconds": limit}}))
    [pod_with_workers] = [d for d in rendered.of_kind("Deployment")
                          if any(c["name"] == "worker" for c in pod_spec(d)["containers"])]
    worker = container(pod_with_workers, "worker")
    assert env_of(worker)["RELAY_BATCH_ITEM_TIME_LIMIT_S"] == str(limit)
    assert pod_spec(pod_with_workers)["terminationGracePeriodSeconds"] >= limit + 40


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_relay_worker_is_pid_1_of_its_container_so_sigterm_reaches_it_alone(name: str) -> None:
    rendered = render(VALUE_SETS[name])
    for deployment in rendered.of_kind("Deployment"):
        assert not pod_spec(deployment).get("shareProcessNamespace")
        for c in pod_spec(deployment)["containers"]:
            assert c["command"][:2] in (["relay", "worker"], ["relay", "api"])  # exec form: no shell in between
            assert "args" not in c and "lifecycle" not in c


def test_probes_use_healthz_and_readyz_on_the_api_and_the_metrics_port_from_inside_the_worker() -> None:
    rendered = render(VALUE_SETS["shared-rwx"])
    api = container(rendered.named("Deployment", "-api"), "api")
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    worker = container(rendered.named("Deployment", "-worker"), "worker")
    for probe in (worker["livenessProbe"], worker["startupProbe"]):  # the kubelet cannot reach the pod's loopback
        command = probe["exec"]["command"]
        assert command[:2] == ["python", "-c"] and "('127.0.0.1', int(os.environ['RELAY_WORKER_METRICS_PORT']))" \
            in command[2]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_workers_metrics_port_stays_inside_the_pod_unless_a_token_guarded_service_monitor_scrapes_it(
        name: str) -> None:
    values = VALUE_SETS[name]
    rendered = render(values)
    monitored = values.get("serviceMonitor", {}).get("enabled", False)
    [workers] = [c for d in rendered.of_kind("Deployment") for c in pod_spec(d)["containers"] if c["name"] == "worker"]
    env = env_of(workers)
    assert env["RELAY_WORKER_METRICS_HOST"] == ("0.0.0.0" if monitored else "127.0.0.1")
    services = [s["metadata"]["name"] for s in rendered.of_kind("Service")]
    assert any(n.endswith("-worker-metrics") for n in services) == monitored
    assert ("ports" in workers) == monitored
    if monitored:
        [secret] = rendered.of_kind("Secret")
        assert secret["stringData"]["RELAY_METRICS_TOKEN"] == SECRETS["metricsToken"]
        assert env["RELAY_METRICS_TOKEN"] == ("secret", secret["metadata"]["name"], "RELAY_METRICS_TOKEN")
        for monitor in rendered.of_kind("ServiceMonitor"):
            [endpoint] = monitor["spec"]["endpoints"]
            assert endpoint["authorization"] == {"type": "Bearer", "credentials": {
                "name": secret["metadata"]["name"], "key": "RELAY_METRICS_TOKEN"}}


def test_a_service_monitor_without_a_metrics_token_is_refused_at_render() -> None:
    values = merged(BASE, {"serviceMonitor": {"enabled": True}})
    del values["secrets"]["metricsToken"]
    with pytest.raises(Exception, match=r"secrets\.metricsToken is required"):
        render(values)


def test_migrations_then_the_catalog_run_as_pre_install_and_pre_upgrade_hooks_after_the_secret() -> None:
    rendered = render(VALUE_SETS["everything-on"])
    migrate, apply = rendered.named("Job", "-migrate"), rendered.named("Job", "-catalog")
    secret, catalog = rendered.of_kind("Secret")[0], rendered.named("ConfigMap", "-catalog")
    assert container(migrate, "migrate")["command"] == ["relay", "migrate"]
    assert container(apply, "apply")["command"] == ["relay", "apply", "/etc/relay/catalog/catalog.yaml"]
    weights = []
    for obj in (secret, catalog, migrate, apply):
        annotations = obj["metadata"]["annotations"]
        assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
        weights.append(int(annotations["helm.sh/hook-weight"]))
    assert weights[0] == weights[1] < weights[2] < weights[3]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_no_secret_value_appears_anywhere_but_in_the_secret(name: str) -> None:
    secrets = [SECRETS[k] for k in ("databaseUrl", "brokerUrl", "adminToken", "secretKey")]
    secrets.append(SECRETS["extra"]["OPENAI_API_KEY"])
    rendered = render(VALUE_SETS[name])
    for obj in rendered.objects:
        if obj["kind"] != "Secret":
            text = json.dumps(obj)
            assert not [s for s in secrets if s in text], f"{obj['kind']} {obj['metadata']['name']}"
    assert not [s for s in secrets if s in rendered.notes]
    for configmap in rendered.of_kind("ConfigMap"):
        assert "value:" not in configmap["data"]["catalog.yaml"]


def test_a_catalog_with_an_inline_host_key_value_is_refused() -> None:
    hosts = [{**CATALOG["hosts"][0], "keys": [{"name": "openai-1", "value": "sk-inline"}]}]
    with pytest.raises(helm.HelmRenderError, match="value_env"):
        render(merged(BASE, {"catalog": {"enabled": True, "spec": {**CATALOG, "hosts": hosts}}}))


def test_the_catalog_job_reads_host_key_values_from_the_secret() -> None:
    job = render(VALUE_SETS["everything-on"]).named("Job", "-catalog")
    apply = container(job, "apply")
    assert apply["envFrom"] == [{"secretRef": {"name": "rl-relay"}}]
    [volume] = pod_spec(job)["volumes"]
    assert volume["configMap"]["name"] == "rl-relay-catalog"


def test_an_existing_secret_is_referenced_everywhere_and_none_is_created() -> None:
    rendered = render(EXISTING_SECRET)
    assert rendered.of_kind("Secret") == []
    for obj in rendered.objects:
        if obj["kind"] in ("Deployment", "Job"):
            for c in pod_spec(obj)["containers"]:
                refs = {v for v in env_of(c).values() if isinstance(v, tuple)}
                assert {(r[1], r[2]) for r in refs} == {("relay-prod", k) for k in (
                    "RELAY_DATABASE_URL", "RELAY_BROKER_URL", "RELAY_ADMIN_TOKEN", "RELAY_SECRET_KEY")}


def test_autoscaling_gives_each_deployment_an_hpa_and_leaves_its_replica_count_to_it() -> None:
    rendered = render(VALUE_SETS["autoscaling"])
    targets = {h["spec"]["scaleTargetRef"]["name"]: h for h in rendered.of_kind("HorizontalPodAutoscaler")}
    deployments = {d["metadata"]["name"]: d for d in rendered.of_kind("Deployment")}
    assert set(targets) == set(deployments) == {"rl-relay-api", "rl-relay-worker"}
    assert all("replicas" not in d["spec"] for d in deployments.values())
    assert targets["rl-relay-worker"]["spec"]["maxReplicas"] == 20
    budgets = {p["metadata"]["name"]: p["spec"]["selector"]["matchLabels"] for p in
               rendered.of_kind("PodDisruptionBudget")}
    for name, deployment in deployments.items():
        assert budgets[name].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("values", [BASE, VALUE_SETS["shared-rwx"]], ids=["workers-in-api-pods", "worker-pods"])
def test_service_monitors_select_services_whose_ports_reach_the_metrics_endpoints(values: dict) -> None:
    rendered = render(merged(values, {"serviceMonitor": {"enabled": True}}))
    services = rendered.of_kind("Service")
    for monitor in rendered.of_kind("ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        [service] = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
        [endpoint] = monitor["spec"]["endpoints"]
        [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        pods = [d for d in rendered.of_kind("Deployment")
                if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert pods, f"service {service['metadata']['name']} selects no pod"
        assert any(p["name"] == port["targetPort"] for d in pods for c in pod_spec(d)["containers"]
                   for p in c.get("ports", []))


def test_the_ingress_routes_to_the_api_service_port() -> None:
    rendered = render(VALUE_SETS["everything-on"])
    [ingress] = rendered.of_kind("Ingress")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    service = rendered.named("Service", "rl-relay")
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}


def test_the_queue_type_setting_reaches_every_relay_container() -> None:
    rendered = render(VALUE_SETS["everything-on"])
    for obj in rendered.of_kind("Deployment") + rendered.of_kind("Job"):
        for c in pod_spec(obj)["containers"]:
            assert env_of(c)["RELAY_QUEUE_TYPE"] == "quorum"


def test_the_chart_lints_without_a_helm_binary_on_the_path(monkeypatch) -> None:
    """The SDK runs Helm's Go code from the library its wheel bundles; nothing is looked up on PATH."""
    monkeypatch.setenv("PATH", "/nonexistent")
    assert helm.lint(CHART, BASE, strict=True)["errors"] == []


def test_retention_runs_the_batches_purge_then_the_usage_purge_on_its_schedule_with_the_payloads() -> None:
    cron = render(merged(BASE, SHARED, {"retention": {"enabled": True, "schedule": "5 4 * * *"}})).named(
        "CronJob", "-retention")
    assert (cron["spec"]["schedule"], cron["spec"]["concurrencyPolicy"]) == ("5 4 * * *", "Forbid")
    spec = pod_spec(cron)
    [first], [then] = spec["initContainers"], spec["containers"]  # an init container ends before the next starts
    assert first["command"] == ["relay", "batches", "purge", "--finished-before", "30d"]
    assert then["command"] == ["relay", "usage", "purge", "--before", "90d"]
    mounts = {m["name"]: m["mountPath"] for m in first["volumeMounts"]}
    assert mounts["payloads"] == env_of(first)["RELAY_BATCH_PAYLOAD_DIR"]
    [volume] = spec["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == payload_claim(render(merged(BASE, SHARED)).named(
        "Deployment", "-worker"))
    assert "volumeMounts" not in then  # the usage purge runs on the database alone


def test_retention_of_usage_alone_needs_no_payloads_and_purging_batches_needs_payloads_every_pod_sees() -> None:
    spec = pod_spec(render(merged(BASE, {"retention": {"enabled": True, "batchesFinishedBefore": ""}})).named(
        "CronJob", "-retention"))
    [only] = spec["containers"]
    assert only["command"] == ["relay", "usage", "purge", "--before", "90d"]
    assert "initContainers" not in spec and "volumes" not in spec
    with pytest.raises(Exception, match="needs payloads every pod sees"):
        render(merged(BASE, {"retention": {"enabled": True}}))  # a pod-local payload directory
    with pytest.raises(Exception, match=r"needs retention\.batchesFinishedBefore or retention\.usageBefore"):
        render(merged(BASE, S3, {"retention": {"enabled": True, "batchesFinishedBefore": "", "usageBefore": ""}}))
    assert not render(BASE).of_kind("CronJob")  # off by default
