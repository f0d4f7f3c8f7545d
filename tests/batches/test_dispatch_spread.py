"""A pass's paced messages reach the queue in parts spread over the pacing step, in the order planned, so a step's
items do not all start (and call upstream, and finish) at once beside the live calls of their policy."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import pytest

from app.batches import pacing
from app.batches.dispatch import SPREAD_PARTS, Dispatcher
from app.batches.publisher import InProcessPublisher
from app.batches.scheduler import Publication


class CallsPublisher(InProcessPublisher):
    """The in-process publisher, also keeping each publish call's messages."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Publication]] = []

    def publish(self, messages: Sequence[Publication]) -> None:
        self.calls.append(list(messages))
        super().publish(messages)


def _dispatcher(publisher: CallsPublisher) -> Dispatcher:
    runtime: Any = SimpleNamespace(settings=SimpleNamespace(dispatch_window=64))
    return Dispatcher(runtime, publisher)


@pytest.mark.parametrize("count", [1, 2, SPREAD_PARTS, 10, 17])
def test_paced_messages_are_published_in_parts_in_their_planned_order(count: int,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "PACE_STEP_S", 0.02)
    batch = uuid4()
    messages = [Publication(batch, (n,)) for n in range(count)]
    publisher = CallsPublisher()
    _dispatcher(publisher)._spread(messages)
    assert len(publisher.calls) == min(count, SPREAD_PARTS)
    assert all(publisher.calls)  # no empty publish
    assert [m for call in publisher.calls for m in call] == messages
    sizes = [len(call) for call in publisher.calls]
    assert max(sizes) - min(sizes) <= 1  # even parts


def test_nothing_to_spread_publishes_nothing() -> None:
    publisher = CallsPublisher()
    _dispatcher(publisher)._spread([])
    assert publisher.calls == []
