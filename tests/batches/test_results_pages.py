"""The results stream a page at a time, the next page read while this one is sent: pages of a few items here, so
that every boundary (and the growth of the pages) is crossed, give the same bytes as one page; a delete between
two pages cuts the stream visibly even though the next page was already read."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest

from app.batches import results
from tests.batches.helpers import CHAT, get, run_in_process, submit

ITEMS = 11


def _body(client: Any, key: str, batch_id: str, fmt: str) -> bytes:
    res = get(client, key, f"/v1/batches/{batch_id}/results", format=fmt)
    assert res.status_code == 200, res.get_data(as_text=True)
    return res.get_data()  # type: ignore[no-any-return]


def _small_pages(monkeypatch: pytest.MonkeyPatch, first: int, most: int) -> None:
    monkeypatch.setattr(results, "RESULTS_CHUNK", first)
    monkeypatch.setattr(results, "RESULTS_PAGE_MAX", most)


@pytest.fixture()
def ran(client: Any, key: str, runtime: Any) -> str:
    """A batch of ITEMS items whose first 8 completed here and the rest are still queued."""
    batch_id = str(submit(client, key, [CHAT] * ITEMS).json["id"])
    assert run_in_process(runtime, batch_id, 8) == ["completed"] * 8
    return batch_id


def test_results_read_in_small_growing_pages_are_the_same_bytes_as_in_one_page(client, key, ran,
                                                                               monkeypatch) -> None:
    whole = {fmt: _body(client, key, ran, fmt) for fmt in ("json", "jsonl")}
    _small_pages(monkeypatch, 2, 4)  # pages of 2, 4, 4, 1 items
    assert {fmt: _body(client, key, ran, fmt) for fmt in ("json", "jsonl")} == whole

    entries = json.loads(whole["json"])["results"]
    assert [json.loads(line) for line in whole["jsonl"].splitlines()] == entries
    assert [entry["idx"] for entry in entries] == list(range(ITEMS))
    assert [entry["state"] for entry in entries] == ["completed"] * 8 + ["queued"] * 3
    assert all(entry["response"]["object"] == "chat.completion" for entry in entries[:8])
    assert all("response" not in entry for entry in entries[8:])  # no response: none reported


def test_item_outcomes_read_in_small_pages_are_those_of_one_page(client, key, runtime, ran, monkeypatch) -> None:
    whole = list(results.result_items(runtime, None, UUID(ran)))
    _small_pages(monkeypatch, 3, 3)
    assert list(results.result_items(runtime, None, UUID(ran))) == whole
    assert [item.idx for item in whole] == list(range(ITEMS))
    assert [bool(item.response) for item in whole] == [True] * 8 + [False] * 3


def test_a_delete_after_the_next_page_was_read_ahead_still_cuts_the_stream_visibly(client, key, runtime,
                                                                                    monkeypatch) -> None:
    batch_id = str(submit(client, key, [CHAT] * ITEMS).json["id"])
    assert run_in_process(runtime, batch_id, ITEMS) == ["completed"] * ITEMS
    _small_pages(monkeypatch, 2, 2)
    stream = results.open_results(runtime, None, batch_id, jsonl=True)
    first = next(stream) + next(stream)  # the opening and the first page; the second is read meanwhile
    assert client.delete(f"/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {key}"}).status_code == 200

    *kept, last = (first + b"".join(stream)).rstrip(b"\n").split(b"\n")
    assert [json.loads(line)["idx"] for line in kept] == [0, 1]
    assert json.loads(last)["error"]["code"] == "results_incomplete"
