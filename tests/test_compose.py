"""compose.yaml cannot run here (no Docker engine): check that it is valid and wired together."""

import ast
import sys
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


def test_the_s3_profile_runs_an_object_store_whose_bucket_and_credentials_relay_uses() -> None:
    seaweedfs, env = COMPOSE["services"]["seaweedfs"], COMPOSE["x-relay-env"]
    assert seaweedfs["profiles"] == ["s3"] and "-master.telemetry=false" in seaweedfs["command"]
    assert f"-bucket={env['RELAY_S3_BUCKET'].split(':-')[1].rstrip('}')}" in seaweedfs["command"]
    assert env["RELAY_S3_ENDPOINT_URL"].endswith("http://seaweedfs:8333}")
    identities = COMPOSE["configs"]["seaweedfs-s3"]["content"]
    assert env["AWS_ACCESS_KEY_ID"] in identities and env["AWS_SECRET_ACCESS_KEY"] in identities
    assert env["RELAY_PAYLOAD_BACKEND"] == "${RELAY_PAYLOAD_BACKEND:-folder}"  # the folder stays the default


def test_rabbitmq_exposes_the_management_ui() -> None:
    rabbit = COMPOSE["services"]["rabbitmq"]
    assert "management" in rabbit["image"]
    assert "15672:15672" in rabbit["ports"]


def _stages() -> dict[str, list[str]]:
    """The Dockerfile's stages by name, each as its instruction lines, in order."""
    stages: dict[str, list[str]] = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            current = stages.setdefault(line.split(" AS ")[-1].strip(), [])
        elif line.strip() and not line.startswith("#"):
            current.append(line)
    return stages


def test_images_are_built_from_the_repository_dockerfile() -> None:
    stages = _stages()
    for name in ("migrate", "api", "worker"):
        assert COMPOSE["services"][name]["build"] == {"context": ".", "target": "relay"}
    assert COMPOSE["services"]["fake-upstream"]["build"] == {"context": ".", "target": "fake-upstream"}
    assert list(stages)[-1] == "relay", "a plain `docker build .` (the Helm chart's image) must build Relay"


def test_relay_image_ships_the_runtime_packages_and_requirements_only() -> None:
    relay = _stages()["relay"]
    copied = {line.split()[1] for line in relay if line.startswith("COPY ")}
    assert {"app", "actors", "adapters", "schemas"} <= copied
    assert not copied & {"devtools", "tests", "bench", "requirements-dev.txt", "."}
    assert "RUN pip install --no-cache-dir -r requirements.txt" in relay
    runtime = (ROOT / "requirements.txt").read_text()
    assert "aiohttp" not in runtime and "pytest" not in runtime


def test_the_fake_upstream_image_holds_the_fake_upstream_alone() -> None:
    fake = _stages()["fake-upstream"]
    copied = {line.split()[1] for line in fake if line.startswith("COPY ")}
    assert copied == {"requirements-dev.txt", "devtools/__init__.py", "devtools/fake_upstream"}
    assert fake[-1].startswith('CMD ["python", "-m", "devtools.fake_upstream"')
    assert "aiohttp==" in (ROOT / "requirements-dev.txt").read_text()
    server = [path for path in (ROOT / "devtools" / "fake_upstream").glob("*.py") if path.name != "harness.py"]
    imported = set().union(*(_top_imports(path) for path in server))
    assert imported - sys.stdlib_module_names == {"aiohttp", "devtools"}, "the image installs aiohttp alone"


def _top_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found
