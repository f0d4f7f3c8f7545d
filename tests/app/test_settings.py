import ast
from pathlib import Path

import pytest

from app.settings import ClientSettings, Settings, SettingsError

BASE = {
    "RELAY_DATABASE_URL": "postgresql://u@127.0.0.1:5432/relay",
    "RELAY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672/%2F",
    "RELAY_ADMIN_TOKEN": "a" * 32,
    "RELAY_SECRET_KEY": "s" * 32,
}


def test_defaults_follow_the_spec() -> None:
    s = Settings.from_env(BASE)
    assert s.batch_payload_dir == "relay-batch-payloads"
    assert s.batch_item_time_limit_s == 300
    assert s.batch_max_items >= 100_000
    assert s.batch_max_bytes >= 256 * 1024 * 1024


@pytest.mark.parametrize("missing", sorted(BASE))
def test_a_missing_required_setting_is_named(missing: str) -> None:
    env = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(SettingsError, match=missing):
        Settings.from_env(env)


def test_a_non_numeric_limit_is_rejected_with_its_name() -> None:
    with pytest.raises(SettingsError, match="RELAY_BATCH_MAX_ITEMS"):
        Settings.from_env({**BASE, "RELAY_BATCH_MAX_ITEMS": "lots"})


def test_a_wrong_database_scheme_is_rejected() -> None:
    with pytest.raises(SettingsError, match="RELAY_DATABASE_URL"):
        Settings.from_env({**BASE, "RELAY_DATABASE_URL": "mysql://x"})


def test_payload_files_are_private_by_default_and_the_mode_is_configurable() -> None:
    assert Settings.from_env(BASE).payload_file_mode == 0o600
    assert Settings.from_env({**BASE, "RELAY_BATCH_PAYLOAD_MODE": "0640"}).payload_file_mode == 0o640


@pytest.mark.parametrize("mode", ["rw-------", "0999", "0400", "01600", "-600"])
def test_a_payload_mode_that_is_not_an_owner_writable_octal_mode_is_rejected(mode: str) -> None:
    with pytest.raises(SettingsError, match="RELAY_BATCH_PAYLOAD_MODE"):
        Settings.from_env({**BASE, "RELAY_BATCH_PAYLOAD_MODE": mode})


def test_failover_broker_urls_are_tried_after_the_broker_url_in_their_order() -> None:
    nodes = ["amqp://guest:guest@10.0.0.2:5672/%2F", "amqps://guest:guest@10.0.0.3:5671/%2F"]
    s = Settings.from_env({**BASE, "RELAY_BROKER_FAILOVER_URLS": f" {nodes[0]} ,{nodes[1]},"})
    assert s.broker_urls == (BASE["RELAY_BROKER_URL"], *nodes)
    assert Settings.from_env(BASE).broker_urls == (BASE["RELAY_BROKER_URL"],)


def test_a_failover_broker_url_that_is_not_amqp_is_rejected_with_its_name() -> None:
    with pytest.raises(SettingsError, match="RELAY_BROKER_FAILOVER_URLS"):
        Settings.from_env({**BASE, "RELAY_BROKER_FAILOVER_URLS": "amqp://a:5672/%2F,http://b:5672/"})


def test_the_process_commands_defaults_are_settings() -> None:
    s = Settings.from_env({**BASE, "RELAY_API_BIND": "0.0.0.0:9000", "RELAY_WORKER_THREADS": "64",
                           "RELAY_WORKER_GEVENT": "1", "RELAY_WORKER_METRICS_PORT": "0"})
    assert (s.api_bind, s.api_workers, s.worker_threads, s.worker_gevent, s.worker_metrics_port) == (
        "0.0.0.0:9000", 2, 64, True, 0)
    assert Settings.from_env(BASE).worker_gevent is False


def test_a_worker_gevent_that_is_not_one_or_zero_is_rejected() -> None:
    with pytest.raises(SettingsError, match="RELAY_WORKER_GEVENT must be 1 or 0"):
        Settings.from_env({**BASE, "RELAY_WORKER_GEVENT": "maybe"})


def test_the_clients_read_their_url_and_credentials_without_the_servers_settings() -> None:
    client = ClientSettings.from_env({"RELAY_URL": "http://relay:8080", "RELAY_KEY": "rk_x"})
    assert (client.url, client.key, client.admin_token) == ("http://relay:8080", "rk_x", None)
    assert ClientSettings.from_env({}).url == "http://127.0.0.1:8080"


def _relay_reads(tree: ast.Module) -> list[str]:
    """The RELAY_* names TREE reads from the environment: os.environ.get / os.getenv / os.environ[...] of a literal
    or of a module constant holding one."""
    constants = {n.targets[0].id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Constant)}
    def name_of(node: ast.expr) -> object:
        return node.value if isinstance(node, ast.Constant) else constants.get(getattr(node, "id", ""))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("get", "getenv") and node.args \
                and "environ" in ast.unparse(node.func) + ("environ" if node.func.attr == "getenv" else ""):
            found.append(name_of(node.args[0]))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
            found.append(name_of(node.slice))
    return [str(n) for n in found if isinstance(n, str) and n.startswith("RELAY_")]


def test_no_relay_variable_is_read_outside_the_settings_module() -> None:
    root = Path(__file__).resolve().parents[2]
    readers = [f"{path.relative_to(root)}: {name}"
               for path in (p for package in ("app", "actors", "adapters") for p in (root / package).rglob("*.py"))
               if path != root / "app" / "settings.py" and "fake_upstream" not in path.parts
               for name in _relay_reads(ast.parse(path.read_text()))]
    assert not readers, f"read RELAY_* in Settings and pass it down: {readers}"


def test_the_check_sees_each_way_of_reading_a_variable() -> None:
    source = 'import os\nPORT = "RELAY_X_PORT"\na = os.environ.get("RELAY_A")\nb = os.getenv("RELAY_B")\n' \
             'c = os.environ["RELAY_C"]\nd = os.environ.get(PORT, "")\ne = os.environ.get("HOME")\n'
    assert _relay_reads(ast.parse(source)) == ["RELAY_A", "RELAY_B", "RELAY_C", "RELAY_X_PORT"]


@pytest.mark.parametrize(("env", "problem"), [
    ({"RELAY_PAYLOAD_BACKEND": "nfs"}, "RELAY_PAYLOAD_BACKEND must be folder or s3"),
    ({"RELAY_PAYLOAD_BACKEND": "s3"}, "RELAY_S3_BUCKET is required"),
    ({"RELAY_PAYLOAD_BACKEND": "s3", "RELAY_S3_BUCKET": "b", "RELAY_S3_ENDPOINT_URL": "minio:9000"},
     "RELAY_S3_ENDPOINT_URL must be an http:// or https:// URL"),
])
def test_a_payload_backend_that_cannot_work_is_rejected_with_its_name(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError, match=problem):
        Settings.from_env({**BASE, **env})


def test_the_folder_is_the_default_payload_backend_and_s3_takes_its_bucket() -> None:
    assert Settings.from_env(BASE).payload_backend == "folder"
    s3 = Settings.from_env({**BASE, "RELAY_PAYLOAD_BACKEND": "s3", "RELAY_S3_BUCKET": "b",
                            "RELAY_S3_ENDPOINT_URL": "http://127.0.0.1:8333", "RELAY_S3_PREFIX": "relay/"})
    assert (s3.s3_bucket, s3.s3_endpoint_url, s3.s3_prefix, s3.s3_region) == \
        ("b", "http://127.0.0.1:8333", "relay/", "us-east-1")
