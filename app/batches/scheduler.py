"""Which batch items start next: the one place that splits what may start between owners and their batches, for
the dispatcher (app/batches/dispatch.py, which publishes what this plans).

- **Who.** Room is split between the owners with items waiting in proportion to their policies' `batch_weight`
  (water_fill), then between one owner's batches, oldest first, in messages interleaved across owners. For the
  window (unpaced and paced alike) an owner's usage is what it has in flight, so a new owner goes first. For a
  paced policy's budget (a few items a pass), in-flight counts are mostly zero and would hand every tie to the
  same owner, so an owner's usage there is what it started since it began waiting, over its weight (PacedShares:
  virtual time, an owner that starts waiting joining at the lowest of those waiting, with no credit for the
  time it did not wait).
- **How fast** is app/batches/pacing.py: what a paced policy's limits let start now (`publishable`), at its share's
  steady rate in steps of PACE_STEP_S (`StartBudget`: never a burst a live caller feels; the dispatcher passes
  that often while a paced batch waits, and each step is split between the owners here).
- **By when**: pacing.py's `expected_seconds`; the batch object and the estimate say `past_deadline` when that is
  after the batch's `completion_window`.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Publication:
    """One message: items of one batch."""

    batch_id: UUID
    idxs: tuple[int, ...]
    policy: str = ""  # shown to operators as the message's `relay-policy` header (RabbitMQ management UI)
    trace: str | None = None  # the submit's traceparent (tracing on), carried in the message's options


Cursor = tuple[UUID, int]  # a batch and its new publish cursor


def water_fill(room: int, want: Mapping[K, int], used: Mapping[K, float], weight: Mapping[K, float]) -> dict[K, int]:
    """Split ROOM items one at a time, each to the key whose (USED + given) ÷ WEIGHT is lowest (ties to the
    smallest key), never past what it WANTs: a weighted fair split that first evens out what each already has."""
    share: dict[K, int] = dict.fromkeys(want, 0)
    heap = [(used.get(k, 0.0) / weight[k], str(k), k) for k in want if want[k] > 0]
    heapq.heapify(heap)
    while room > 0 and heap:
        _, name, key = heapq.heappop(heap)
        share[key] += 1
        room -= 1
        if share[key] < want[key]:
            heapq.heappush(heap, ((used.get(key, 0.0) + share[key]) / weight[key], name, key))
    return share


def _by_owner(batches: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    owners: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        owners.setdefault(batch["owner"], []).append(batch)
    return owners


def _weights(owners: Mapping[str, list[dict[str, Any]]]) -> dict[str, float]:
    return {o: max(float(b.get("weight") or 1.0) for b in owned) for o, owned in owners.items()}


def _wants(owners: Mapping[str, list[dict[str, Any]]]) -> dict[str, int]:
    return {o: sum(b["total"] - b["published_upto"] for b in owned) for o, owned in owners.items()}


def plan_pass(batches: Sequence[dict[str, Any]], room: int, group: int,
              in_flight: dict[str, int] | None = None) -> tuple[list[Publication], list[Cursor]]:
    """Split ROOM items between the owners of BATCHES by what they have in flight and their weights (water_fill),
    then between an owner's batches, oldest first, in messages of up to GROUP items interleaved across owners;
    the messages and each batch's new cursor."""
    owners = _by_owner(batches)
    share = water_fill(room, _wants(owners), {o: float(n) for o, n in (in_flight or {}).items()}, _weights(owners))
    queues: list[list[Publication]] = []
    cursors: list[Cursor] = []
    for owner, owned in owners.items():
        left, messages = share[owner], []
        for batch, take in _oldest_first(owned, left):
            start = batch["published_upto"]
            messages += [Publication(batch["id"], tuple(range(i, min(i + group, start + take))),
                                     batch.get("policy") or "", batch.get("trace_context"))
                         for i in range(start, start + take, group)]
            cursors.append((batch["id"], start + take))
        queues.append(messages)
    return [m for round_ in _interleave(queues) for m in round_], cursors


def _oldest_first(owned: Sequence[dict[str, Any]], room: int) -> list[tuple[dict[str, Any], int]]:
    """ROOM items of one owner given to its batches oldest first: (batch, items) for each batch that gets some."""
    taken = []
    for batch in owned:
        take = min(room, batch["total"] - batch["published_upto"])
        if take > 0:
            room -= take
            taken.append((batch, take))
    return taken


def _interleave(queues: list[list[Publication]]) -> list[list[Publication]]:
    longest = max((len(q) for q in queues), default=0)
    return [[q[i] for q in queues if i < len(q)] for i in range(longest)]


class PacedShares:
    """The fair split of paced policies' budgets between owners, kept by the dispatcher across passes: per policy,
    each waiting owner's virtual time (items started since it began waiting ÷ its weight)."""

    def __init__(self) -> None:
        self._virtual: dict[UUID, dict[str, float]] = {}

    def split(self, policy_id: UUID, room: int, batches: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """BATCHES of one paced policy cut to ROOM items in all, split between their owners by virtual time and
        weight, then oldest first: each batch with `total` lowered to what it may publish now (none left out
        that gets nothing)."""
        owners = _by_owner(batches)
        want, weight = _wants(owners), _weights(owners)
        virtual = self._virtual.setdefault(policy_id, {})
        for owner in [o for o in virtual if want.get(o, 0) <= 0]:
            del virtual[owner]  # no longer waiting: it earns nothing meanwhile
        floor = min(virtual.values(), default=0.0)
        for owner in want:
            virtual.setdefault(owner, floor)
        share = water_fill(room, want, {o: virtual[o] * weight[o] for o in want}, weight)
        kept = []
        for owner, owned in owners.items():
            virtual[owner] += share[owner] / weight[owner]
            kept += [{**batch, "total": batch["published_upto"] + take}
                     for batch, take in _oldest_first(owned, share[owner])]
        low = min(virtual.values(), default=0.0)
        for owner in virtual:
            virtual[owner] -= low  # keep the numbers small; only their differences matter
        return kept
