"""The dispatcher's order of work: room in the window split between owners by what they have in flight and their
policies' batch_weight, then between one owner's batches oldest first, in messages interleaved across owners."""

from __future__ import annotations

from collections import Counter
from typing import Any
from uuid import UUID, uuid4

from app.batches.dispatch import Dispatcher, Publication, plan_pass
from app.batches.publisher import InProcessPublisher
from app.batches.scheduler import PacedShares


def _batch(owner: str, total: int, published: int = 0, weight: float = 1.0) -> dict[str, Any]:
    return {"id": uuid4(), "owner": owner, "total": total, "published_upto": published, "weight": weight}


def _items_by_owner(batches: list[dict[str, Any]], messages: list[Publication]) -> Counter[str]:
    owner_of: dict[UUID, str] = {b["id"]: b["owner"] for b in batches}
    return Counter({owner: 0 for owner in owner_of.values()}) + Counter(
        {o: n for o, n in Counter(owner_of[m.batch_id] for m in messages for _ in m.idxs).items()})


def test_two_owners_with_nothing_in_flight_get_equal_shares_in_alternating_messages() -> None:
    batches = [_batch("a", 10_000), _batch("b", 10_000)]
    messages, cursors = plan_pass(batches, room=100, group=5)
    assert _items_by_owner(batches, messages) == {"a": 50, "b": 50}
    owners = [("a" if m.batch_id == batches[0]["id"] else "b") for m in messages]
    assert owners == ["a", "b"] * 10
    assert sorted(c[1] for c in cursors) == [50, 50]


def test_a_new_owner_gets_the_room_before_an_owner_who_already_has_items_in_flight() -> None:
    batches = [_batch("big", 20_000, published=500), _batch("small", 5)]
    messages, _ = plan_pass(batches, room=40, group=1, in_flight={"big": 500})
    assert _items_by_owner(batches, messages) == {"big": 35, "small": 5}
    assert {m.batch_id for m in messages[:5]} >= {batches[1]["id"]}  # the small batch goes out first


def test_weights_split_the_room_in_proportion() -> None:
    batches = [_batch("heavy", 10_000, weight=3), _batch("light", 10_000, weight=1)]
    messages, _ = plan_pass(batches, room=400, group=8)
    assert _items_by_owner(batches, messages) == {"heavy": 300, "light": 100}


def test_weights_apply_to_what_is_in_flight_not_only_to_this_pass() -> None:
    batches = [_batch("heavy", 10_000, published=90, weight=3), _batch("light", 10_000, published=10)]
    messages, _ = plan_pass(batches, room=40, group=1, in_flight={"heavy": 90, "light": 10})
    assert _items_by_owner(batches, messages) == {"heavy": 15, "light": 25}  # 105 : 35 in flight, as 3 : 1 wants


def test_what_an_owner_cannot_use_goes_to_the_others_and_cursors_never_pass_the_total() -> None:
    batches = [_batch("a", 3), _batch("b", 1000)]
    messages, cursors = plan_pass(batches, room=100, group=8)
    assert _items_by_owner(batches, messages) == {"a": 3, "b": 97}
    assert dict(cursors) == {batches[0]["id"]: 3, batches[1]["id"]: 97}


def test_one_owners_batches_are_published_oldest_first() -> None:
    older, newer = _batch("a", 30), _batch("a", 30)
    messages, cursors = plan_pass([older, newer], room=40, group=10)
    assert [m.batch_id for m in messages] == [older["id"]] * 3 + [newer["id"]]
    assert dict(cursors) == {older["id"]: 30, newer["id"]: 10}


def test_messages_group_consecutive_items_of_one_batch() -> None:
    batch = _batch("a", 100, published=40)
    messages, _ = plan_pass([batch], room=20, group=8)
    assert [m.idxs for m in messages] == [tuple(range(40, 48)), tuple(range(48, 56)), tuple(range(56, 60))]


def test_items_are_grouped_only_when_they_are_fast_and_the_backlog_is_deep() -> None:
    class FakeRuntime:
        class settings:
            queue_name = "q"
            dispatch_window = 100_000

    fast = Dispatcher(FakeRuntime(), InProcessPublisher(), item_seconds=lambda: 0.002)  # type: ignore[arg-type]
    slow = Dispatcher(FakeRuntime(), InProcessPublisher(), item_seconds=lambda: 0.3)  # type: ignore[arg-type]
    assert fast.window(threads=32, backlog=20_000, processes=2) == (2 * 32 * 8 + 32, 8)
    assert fast._refill == (2 * 32 * 8 + 32) // (6 * 2)  # a sixth of the window, seen from one of two processes
    assert fast.window(threads=32, backlog=50) == (2 * 32 + 32, 1)  # a small backlog: one item a message
    # Zero-latency items on busy cores (~30 ms of wall time each, mostly waiting for the CPU) still fill messages.
    busy = Dispatcher(FakeRuntime(), InProcessPublisher(), item_seconds=lambda: 0.03)  # type: ignore[arg-type]
    assert busy.window(threads=32, backlog=20_000, processes=2)[1] == 8
    # Slow items: one a message, and queued behind the running ones only LEAD_S of work: 0.1 / 0.3 of 2 * 32.
    assert slow.window(threads=32, backlog=20_000, processes=2) == (32 + 22, 1)
    assert slow._refill == min(54 // (6 * 2), 22 // (2 * 2))  # a sixth of the window, at most half the lead
    unknown = Dispatcher(FakeRuntime(), InProcessPublisher(), item_seconds=lambda: 0.0)  # type: ignore[arg-type]
    assert unknown.window(threads=32, backlog=20_000) == (2 * 32 + 32, 1)  # nothing finished yet: not grouped


def _paced(shares: PacedShares, policy: UUID, batches: list[dict[str, Any]], room: int) -> Counter[str]:
    """One pass of a paced policy's budget: items given to each owner (and the batches' cursors moved by them)."""
    cut = shares.split(policy, room, batches)
    given: Counter[str] = Counter()
    for batch in cut:
        original = next(b for b in batches if b["id"] == batch["id"])
        given[batch["owner"]] += batch["total"] - original["published_upto"]
        original["published_upto"] = batch["total"]
    return given


def test_a_paced_budget_of_one_item_a_pass_alternates_between_two_waiting_owners() -> None:
    shares, policy = PacedShares(), uuid4()
    batches = [_batch("x", 300), _batch("y", 20)]
    given = sum((_paced(shares, policy, batches, room=1) for _ in range(20)), Counter())
    assert given == {"x": 10, "y": 10}  # in-flight counts (all zero here) would have given every item to "x"


def test_an_owner_that_starts_waiting_late_gets_no_credit_for_the_time_before() -> None:
    shares, policy = PacedShares(), uuid4()
    old = [_batch("x", 300)]
    for _ in range(30):
        _paced(shares, policy, old, room=2)
    batches = [*old, _batch("y", 100)]
    given = sum((_paced(shares, policy, batches, room=2) for _ in range(10)), Counter())
    assert given == {"x": 10, "y": 10}  # shared from its arrival on, not all to the newcomer until it catches up


def test_a_paced_budget_follows_the_weights_and_then_an_owners_batches_oldest_first() -> None:
    shares, policy = PacedShares(), uuid4()
    heavy_old, heavy_new, light = _batch("heavy", 5, weight=3), _batch("heavy", 50, weight=3), _batch("light", 50)
    batches = [heavy_old, heavy_new, light]
    given = sum((_paced(shares, policy, batches, room=4) for _ in range(10)), Counter())
    assert given == {"heavy": 30, "light": 10}
    assert heavy_old["published_upto"] == 5 and heavy_new["published_upto"] == 25
