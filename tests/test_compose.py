"""compose.yaml cannot run here (no Docker engine): check that it is valid and wired together."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_has_every_part_of_relay() -> None:
    assert {"postgres", "rabbitmq", "api", "worker", "fake-upstream"} <= set(COMPOSE["services"])


def test_every_dependency_and_volume_is_declared() -> None:
    services = COMPOSE["services"]
    for name, service in services.items():
        for dep in service.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            assert source in COMPOSE["volumes"], f"{name} mounts undeclared volume {source}"


def test_api_and_workers_share_the_payload_volume_at_the_configured_dir() -> None:
    api, worker = COMPOSE["services"]["api"], COMPOSE["services"]["worker"]
    for service in (api, worker):
        target = service["environment"]["RELAY_BATCH_PAYLOAD_DIR"]
        assert f"batch-payloads:{target}" in service["volumes"]


def test_rabbitmq_exposes_the_management_ui() -> None:
    rabbit = COMPOSE["services"]["rabbitmq"]
    assert "management" in rabbit["image"]
    assert "15672:15672" in rabbit["ports"]


def test_images_are_built_from_the_repository_dockerfile() -> None:
    assert (ROOT / "Dockerfile").exists()
    for name in ("api", "worker", "fake-upstream"):
        assert COMPOSE["services"][name]["build"] == "."
