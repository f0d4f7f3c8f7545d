import pytest

from app.settings import Settings, SettingsError

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
