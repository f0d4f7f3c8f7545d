"""Relay's Standard Webhooks signatures checked by two independent verifiers (the `standardwebhooks` package and the
`openai` SDK), the secret format, the retry schedule and the event types."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import openai
import pytest
import standardwebhooks

from app.settings import Settings
from app.webhooks import signing
from app.webhooks.delivery import retry_wait
from app.webhooks.events import event_type, expiry_passed, render
from app.wiring import plug_into_engine
from tests.webhooks.helpers import new_secret

BODY = b'{"id":"evt_1","object":"event","created_at":1,"type":"batch.completed","data":{"id":"batch_1"}}'


def _headers(*secrets: str, at: int | None = None) -> dict[str, str]:
    keys = [signing.secret_bytes(s) for s in secrets]
    return signing.headers(keys, "evt_1", int(time.time()) if at is None else at, BODY)


def test_one_signature_verifies_with_standardwebhooks_and_the_openai_sdk() -> None:
    secret = new_secret()
    headers = _headers(secret)
    assert headers["webhook-signature"].startswith("v1,") and " " not in headers["webhook-signature"]
    assert standardwebhooks.Webhook(secret).verify(BODY, headers)["data"] == {"id": "batch_1"}
    event = openai.OpenAI(api_key="x", webhook_secret=secret).webhooks.unwrap(BODY, headers)
    assert event.type == "batch.completed" and event.data.id == "batch_1"


def test_two_secrets_give_two_signatures_and_either_secret_verifies() -> None:
    new, old, other = new_secret(), new_secret(), new_secret()
    headers = _headers(new, old)
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):
        standardwebhooks.Webhook(secret).verify(BODY, headers)
        openai.OpenAI(api_key="x").webhooks.verify_signature(BODY, headers, secret=secret)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(other).verify(BODY, headers)


def test_a_changed_byte_an_old_timestamp_or_another_id_is_refused() -> None:
    secret = new_secret()
    headers = _headers(secret)
    verify = standardwebhooks.Webhook(secret).verify
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify(BODY.replace(b"batch_1", b"batch_2"), headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify(BODY, _headers(secret, at=int(time.time()) - 301))
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        verify(BODY, {**headers, "webhook-id": "evt_2"})


@pytest.mark.parametrize("text", ["whsec_", "sk_abc", "whsec_!!!!", "whsec_" + "A" * 30, "whsec_QUJD",
                                  "whsec_" + "QUJD" * 30])
def test_a_secret_must_be_whsec_and_base64_of_24_to_64_bytes(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        signing.secret_bytes(text)
    assert text[6:] not in str(refused.value) or not text[6:]


def test_the_retry_wait_doubles_from_the_minimum_up_to_the_maximum() -> None:
    settings = replace(Settings(database_url="postgresql://x", broker_url="amqp://x", admin_token="a" * 16,
                                secret_key="s" * 16), webhook_retry_min_s=5, webhook_retry_max_s=3600)
    assert [retry_wait(settings, n) for n in range(1, 12)] == [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600]
    assert retry_wait(settings, 500) == 3600


@pytest.fixture(autouse=True)
def _compatible_apis_registered() -> None:
    plug_into_engine()  # as every process does at boot: the OpenAI and Anthropic event formats


def test_the_event_type_follows_the_batch_api_and_how_it_ended() -> None:
    ended = datetime.now(UTC)
    base = {"status": "queued", "expires_at": None, "finished_at": ended}
    assert event_type({**base, "api": "openai"}, expired=False) == "batch.completed"
    assert event_type({**base, "api": "openai"}, expired=True) == "batch.expired"
    assert event_type({**base, "api": "openai", "status": "cancelled"}, expired=True) == "batch.cancelled"
    assert event_type({**base, "api": "relay"}, expired=False) == "batch.finished"
    assert event_type({**base, "api": "anthropic", "status": "cancelled"}, expired=False) == "batch.cancelled"
    assert not expiry_passed({**base, "api": "openai", "expires_at": ended + timedelta(seconds=1)})
    assert expiry_passed({**base, "api": "openai", "expires_at": ended})
    assert not expiry_passed({**base, "api": "anthropic", "expires_at": ended})


def test_an_openai_event_body_is_exactly_openais_shape() -> None:
    event_id, batch_id = uuid.uuid4(), uuid.uuid4()
    body = render(event_id, "batch.completed", {"api": "openai", "id": batch_id,
                                                "finished_at": datetime.fromtimestamp(1_700_000_000, UTC)}, {})
    assert body == (f'{{"id":"evt_{event_id.hex}","object":"event","created_at":1700000000,'
                    f'"type":"batch.completed","data":{{"id":"batch_{batch_id.hex}"}}}}')
