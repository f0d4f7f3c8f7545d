"""Queue arguments per RELAY_QUEUE_TYPE: classic declarations stay Dramatiq's own, quorum adds the type only."""

import pytest

from app.queues import queue_arguments
from app.settings import Settings, SettingsError
from tests.app.test_settings import BASE

DRAMATIQ = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "relay.batch_items.XQ"}


def test_the_item_queue_is_classic_unless_told_otherwise() -> None:
    assert Settings.from_env(BASE).queue_type == "classic"
    assert Settings.from_env({**BASE, "RELAY_QUEUE_TYPE": "quorum"}).queue_type == "quorum"


def test_an_unknown_queue_type_is_rejected_with_its_name() -> None:
    with pytest.raises(SettingsError, match="RELAY_QUEUE_TYPE"):
        Settings.from_env({**BASE, "RELAY_QUEUE_TYPE": "stream"})


def test_classic_queues_are_declared_exactly_as_dramatiq_declares_them() -> None:
    assert queue_arguments("classic", DRAMATIQ) == DRAMATIQ


def test_quorum_queues_keep_dead_lettering_and_add_only_their_type() -> None:
    assert queue_arguments("quorum", DRAMATIQ) == {**DRAMATIQ, "x-queue-type": "quorum"}


def test_a_quorum_queue_with_priorities_is_refused_before_rabbitmq_sees_it() -> None:
    with pytest.raises(ValueError, match="x-max-priority"):
        queue_arguments("quorum", {**DRAMATIQ, "x-max-priority": 5})
