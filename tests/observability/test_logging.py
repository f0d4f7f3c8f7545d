"""JSON logs: one object per line with the request id or batch id and idx; secrets never written."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from app.observability.logs import install_json_logging, log_context
from app.redaction import redact, register_secrets

SECRETS = [
    "rk_Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWpr",
    "rt_eyJ0aWQiOiIxMjMiLCJ1aWQiOiI0NTYifQ.c2lnbmF0dXJlLXZhbHVlLWhlcmU",
    "sk-proj-AbCdEf0123456789",
    "sk-ant-api03-xyzXYZ0123456789",
]


@pytest.fixture()
def logs() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    stream = io.StringIO()
    install_json_logging(logging.DEBUG, stream=stream, force=True)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_object_with_time_level_logger_and_message(logs) -> None:
    logging.getLogger("relay.test").info("hello %s", "world", extra={"items": 3})
    [entry] = lines(logs)
    assert entry["level"] == "info" and entry["logger"] == "relay.test" and entry["message"] == "hello world"
    assert entry["items"] == 3 and entry["time"].endswith("Z") and "T" in entry["time"]
    assert "request_id" not in entry and "batch_id" not in entry


def test_a_live_request_carries_its_request_id(app, logs) -> None:
    with app.test_request_context("/v1/chat/completions"):
        from flask import g

        g.request_id = "req-abc123"
        logging.getLogger("relay.pipeline").warning("upstream slow")
    assert lines(logs)[0]["request_id"] == "req-abc123"


def test_a_batch_item_carries_its_batch_id_and_idx(logs) -> None:
    with log_context(batch_id="b-1", idx=7):
        logging.getLogger("relay.batches").info("item done")
        with log_context(idx=8):
            logging.getLogger("relay.batches").info("next item")
    logging.getLogger("relay.batches").info("outside")
    first, second, outside = lines(logs)
    assert (first["batch_id"], first["idx"]) == ("b-1", 7)
    assert (second["batch_id"], second["idx"]) == ("b-1", 8)
    assert "batch_id" not in outside and "idx" not in outside


def test_secrets_are_redacted_in_messages_arguments_extras_and_tracebacks(logs) -> None:
    log = logging.getLogger("relay.test")
    log.info("key %s used", SECRETS[0])
    log.info("header Authorization: Bearer %s", "some.opaque-token_value")
    log.info("sent", extra={"headers": {"authorization": f"Bearer {SECRETS[1]}", "x-api-key": SECRETS[2]}})
    log.info("config x-api-key: plainvalue123 and %s", SECRETS[3])
    try:
        raise ValueError(f"upstream rejected {SECRETS[2]}")
    except ValueError:
        log.exception("call failed")
    text = logs.getvalue()
    for secret in [*SECRETS, "some.opaque-token_value", "plainvalue123"]:
        assert secret not in text
    assert text.count("[REDACTED]") >= 7
    assert all(isinstance(entry, dict) for entry in lines(logs))  # still valid JSON after redaction
    assert "ValueError" in lines(logs)[-1]["exception"]


def test_an_existing_logging_setup_is_left_alone_unless_forced() -> None:
    root = logging.getLogger()
    handlers = list(root.handlers)
    assert handlers  # pytest's own capture handlers
    assert install_json_logging() is None
    assert root.handlers == handlers


def test_redaction_leaves_ordinary_words_alone() -> None:
    text = "network_timeout_seconds and work_items and task-runner and bearer-less"
    assert redact(text) == text


def test_registered_secrets_such_as_the_admin_token_are_redacted(logs) -> None:
    register_secrets(["admin-token-0123456789abcdef"])
    logging.getLogger("relay.test").error("token admin-token-0123456789abcdef was sent")
    assert "admin-token-0123456789abcdef" not in logs.getvalue()
