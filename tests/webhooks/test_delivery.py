"""Deliveries to a real receiver process: retried with backoff through failures and a receiver that is down, the
same webhook-id on every attempt; every attempt on the admin route; send again; secret rotation with two valid
signatures; a batch's own callback_url; a delivery that gives up, visibly; the metrics."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import standardwebhooks

from devtools.cluster.ports import reserve
from devtools.processes import RelayProcess
from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.webhooks.helpers import (
    CALLBACK_SECRET,
    OLD_SECRET,
    PROJECT_SECRET,
    for_batch,
    new_secret,
    submit,
    wait_delivery,
)

pytestmark = pytest.mark.integration


def test_a_failing_receiver_gets_retries_with_the_same_webhook_id_until_it_answers_2xx(
        stack: Stack, worker: RelayProcess, receiver: Receiver) -> None:
    receiver.behave("/project", status=503, times=3)
    batch_id = submit(stack, stack.new_key("hooks"))
    received = for_batch(receiver, "/project", batch_id, count=4)
    assert len({r.header("webhook-id") for r in received}) == 1
    assert all(standardwebhooks.Webhook(PROJECT_SECRET).verify(r.body, r.headers) for r in received)
    assert len({r.body for r in received}) == 1  # the same bytes every time, signed with each attempt's timestamp
    gaps = [b.received_at - a.received_at for a, b in itertools.pairwise(received)]
    assert all(gap >= 0.2 for gap in gaps)  # RELAY_WEBHOOK_RETRY_MIN_S here (Dramatiq's delays round up to ~1 s)
    detail = wait_delivery(stack, batch_id, "delivered")
    assert detail["attempts"] == 4 and detail["last_status"] == 200 and detail["last_error"] is None
    assert [a["status"] for a in detail["attempt_log"]] == [503, 503, 503, 200]
    assert [a["error"] for a in detail["attempt_log"]] == ["HTTP 503"] * 3 + [None]
    assert all(a["latency_ms"] >= 0 and a["started_at"] for a in detail["attempt_log"])
    assert detail["event_id"] == received[0].header("webhook-id") and detail["destination"] == "project:p-hooks"


def test_a_receiver_down_then_up_gets_the_event_with_the_same_webhook_id(
        stack: Stack, worker: RelayProcess, receiver: Receiver) -> None:
    receiver.stop()
    batch_id = submit(stack, stack.new_key("hooks"))
    deadline = time.monotonic() + 20
    while not (found := _delivery(stack, batch_id)) or found["attempts"] < 3 or not found["last_error"]:
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    assert found["state"] == "pending" and "ConnectionRefusedError" in found["last_error"]
    receiver.start()
    [received] = for_batch(receiver, "/project", batch_id)
    detail = wait_delivery(stack, batch_id, "delivered")
    assert received.header("webhook-id") == detail["event_id"]
    assert all(a["status"] is None and "Connection" in a["error"] for a in detail["attempt_log"][:-1])


def test_send_again_delivers_the_same_event_again_and_lists_every_attempt(
        stack: Stack, worker: RelayProcess, receiver: Receiver) -> None:
    batch_id = submit(stack, stack.new_key("hooks"))
    [first] = for_batch(receiver, "/project", batch_id)
    detail = wait_delivery(stack, batch_id, "delivered")
    res = stack.admin("POST", f"/admin/webhooks/deliveries/{detail['id']}/send-again")
    assert res.status_code == 202 and res.json["state"] == "pending"
    second = for_batch(receiver, "/project", batch_id, count=2)[1]
    assert second.header("webhook-id") == first.header("webhook-id") and second.body == first.body
    again = wait_delivery(stack, batch_id, "delivered")
    assert again["attempts"] == 2 and [a["n"] for a in again["attempt_log"]] == [1, 2]
    assert again["event"]["data"]["id"] == batch_id
    missing = stack.admin("POST", "/admin/webhooks/deliveries/00000000-0000-0000-0000-000000000000/send-again")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "delivery_not_found"
    assert stack.admin("GET", "/admin/webhooks/deliveries/not-an-id").status_code == 404
    assert stack.call("rk_nope", "GET", "/admin/webhooks/deliveries").status_code == 401


def test_during_a_rotation_both_secrets_sign_and_afterwards_only_the_new_one(
        stack: Stack, worker: RelayProcess, receiver: Receiver, apply_catalog: Any) -> None:
    new = new_secret()
    apply_catalog(project=[{"url": f"{receiver.url}/project", "secret": new, "previous_secret": OLD_SECRET}])
    key = stack.new_key("hooks")
    [during] = for_batch(receiver, "/project", submit(stack, key))
    assert len(during.header("webhook-signature").split(" ")) == 2
    for secret in (new, OLD_SECRET):  # a receiver still on the old secret and one already on the new both verify
        assert standardwebhooks.Webhook(secret).verify(during.body, during.headers)
    apply_catalog(project=[{"url": f"{receiver.url}/project", "secret": new}])
    [after] = for_batch(receiver, "/project", submit(stack, key))
    assert len(after.header("webhook-signature").split(" ")) == 1
    assert standardwebhooks.Webhook(new).verify(after.body, after.headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OLD_SECRET).verify(after.body, after.headers)
    apply_catalog(project=[{"url": f"{receiver.url}/project"}])  # an export re-applied: no secret, keeps the stored
    [kept] = for_batch(receiver, "/project", submit(stack, key))
    assert standardwebhooks.Webhook(new).verify(kept.body, kept.headers)


def test_a_callback_url_gets_the_batch_event_signed_with_the_callback_secret(
        stack: Stack, worker: RelayProcess, receiver: Receiver, apply_catalog: Any) -> None:
    apply_catalog(project=[])
    key = stack.new_key("hooks")
    batch_id = submit(stack, key, callback_url=f"{receiver.url}/callback?job=7", callback_secret=CALLBACK_SECRET)
    [received] = for_batch(receiver, "/callback", batch_id)
    assert received.path == "/callback?job=7"
    assert standardwebhooks.Webhook(CALLBACK_SECRET).verify(received.body, received.headers)["type"] == \
        "batch.finished"
    assert wait_delivery(stack, batch_id, "delivered")["destination"] == "callback"
    batch = stack.read(key, batch_id, limit=0)
    assert "callback_secret" not in batch and CALLBACK_SECRET not in str(batch)


@pytest.mark.parametrize("url", ["http://hooks.example.com/x", "http://10.0.0.5/x", "http://127.0.0.1.nip.io/x"])
def test_a_callback_url_to_a_host_not_allowed_is_refused_at_submit_and_nothing_is_stored(
        stack: Stack, url: str) -> None:
    key = stack.new_key("hooks")
    before = stack.db_one("SELECT count(*) AS n FROM batches")["n"]
    res = stack.call(key, "POST", "/v1/batches", json={"shape": "openai", "callback_url": url,
                                                       "callback_secret": CALLBACK_SECRET, "requests": [
                                                           {"model": "gpt-4o-mini", "messages": []}]})
    assert res.status_code == 400 and res.json["error"]["code"] == "callback_url_not_allowed", res.json
    assert stack.db_one("SELECT count(*) AS n FROM batches")["n"] == before


@pytest.mark.parametrize(("extra", "field"), [
    ({"callback_url": "http://127.0.0.1/x"}, "callback_secret"),
    ({"callback_url": "ftp://127.0.0.1/x", "callback_secret": CALLBACK_SECRET}, "callback_url"),
    ({"callback_url": "http://u:p@127.0.0.1/x", "callback_secret": CALLBACK_SECRET}, "callback_url"),
    ({"callback_url": "http://127.0.0.1/x", "callback_secret": "whsec_short"}, "callback_secret"),
    ({"callback_url": "http://127.0.0.1/x", "callback_secret": "not-a-secret"}, "callback_secret"),
])
def test_a_bad_callback_is_a_400_naming_the_member(stack: Stack, extra: dict[str, str], field: str) -> None:
    res = stack.call(stack.new_key("hooks"), "POST", "/v1/batches", json={
        "shape": "openai", "requests": [{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}],
        **extra})
    assert res.status_code == 400 and res.json["error"]["code"] == "invalid_batch", res.json
    assert [d["field"] for d in res.json["error"]["details"]] == [field]
    assert CALLBACK_SECRET not in res.get_data(as_text=True)


def test_the_openai_create_takes_a_callback_url_and_refuses_one_not_allowed(
        stack: Stack, worker: RelayProcess, hooks_api: RelayProcess, receiver: Receiver, apply_catalog: Any) -> None:
    import openai

    from tests.webhooks.helpers import create_openai

    apply_catalog(project=[])
    client = openai.OpenAI(base_url=hooks_api.url + "/v1", api_key=stack.new_key("hooks"), max_retries=0,
                           webhook_secret=CALLBACK_SECRET)
    batch = create_openai(client, 1, callback_url=f"{receiver.url}/openai-callback", callback_secret=CALLBACK_SECRET)
    [received] = for_batch(receiver, "/openai-callback", batch.id)
    assert client.webhooks.unwrap(received.body, received.headers).data.id == batch.id
    with pytest.raises(openai.BadRequestError) as refused:
        create_openai(client, 1, callback_url="https://hooks.example.com/x", callback_secret=CALLBACK_SECRET)
    assert refused.value.code == "callback_url_not_allowed"


def test_a_delivery_past_its_give_up_window_is_failed_visibly(stack: Stack, receiver: Receiver) -> None:
    stack.start_worker(threads=4, webhook_give_up_after_s=1.5)
    receiver.behave("/project", status=500)
    batch_id = submit(stack, stack.new_key("hooks"))
    detail = wait_delivery(stack, batch_id, "failed", timeout=30)
    assert detail["last_status"] == 500 and detail["finished_at"] and detail["next_attempt_at"] is None
    assert 3 <= detail["attempts"] <= 6 and all(a["status"] == 500 for a in detail["attempt_log"])
    listed = stack.admin("GET", "/admin/webhooks/deliveries", query_string={"state": "failed", "limit": 200})
    assert detail["id"] in [d["id"] for d in listed.json["data"]]
    assert "failed after" in stack.processes[-1].log()  # and in the worker's log


def test_the_metrics_count_deliveries_and_show_the_oldest_undelivered(
        stack: Stack, receiver: Receiver, hooks_api: RelayProcess, tmp_path: Path) -> None:
    [port] = reserve(1, tmp_path)  # a worker setting, so not port 0: one outside the ephemeral range, claimed
    stack.start_worker(threads=4, worker_metrics_port=port)
    receiver.behave("/project", status=500)
    batch_id = submit(stack, stack.new_key("hooks"))
    for_batch(receiver, "/project", batch_id, count=2)
    time.sleep(1.2)
    text = requests.get(hooks_api.url + "/metrics", headers={"Authorization": f"Bearer {stack.settings.admin_token}"},
                        timeout=10).text
    assert _value(text, "relay_webhook_deliveries_pending") >= 1
    assert _value(text, "relay_webhook_oldest_undelivered_seconds") >= 1.0
    receiver.behave("/project", status=200)
    wait_delivery(stack, batch_id, "delivered")
    worker_text = requests.get(f"http://127.0.0.1:{port}/metrics",
                               headers={"Authorization": f"Bearer {stack.settings.admin_token}"}, timeout=10).text
    assert _value(worker_text, 'relay_webhook_attempt_duration_seconds_count{outcome="failed"}') >= 2
    assert _value(worker_text, 'relay_webhook_deliveries_total{outcome="delivered"}') >= 1


def _delivery(stack: Stack, batch_id: str) -> dict[str, Any] | None:
    found = stack.admin("GET", "/admin/webhooks/deliveries", query_string={"batch_id": batch_id}).json["data"]
    return found[0] if found else None


def _value(text: str, name: str) -> float:
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def test_an_https_receiver_with_an_untrusted_certificate_gets_nothing(stack: Stack, worker: RelayProcess,
                                                                    apply_catalog: Any, tmp_path: Any) -> None:
    with _tls_server(tmp_path) as (port, received):
        apply_catalog(project=[{"url": f"https://localhost:{port}/hook", "secret": PROJECT_SECRET}])
        batch_id = submit(stack, stack.new_key("hooks"), 1)
        deadline = time.monotonic() + 20
        while not (found := _delivery(stack, batch_id)) or not found["last_error"]:  # its first attempt's outcome
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
        assert found["state"] == "pending" and "CERTIFICATE_VERIFY_FAILED" in found["last_error"]
        assert received == []  # the handshake failed: no request was sent


@contextlib.contextmanager
def _tls_server(directory: Any) -> Iterator[tuple[int, list[bytes]]]:
    """An HTTPS server on a free loopback port with a self-signed certificate for localhost (no bundle trusts it),
    keeping what it receives."""
    import datetime as dt
    import http.server
    import ssl
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            self.send_response(200)
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()
