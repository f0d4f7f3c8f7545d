"""Postgres drops a real `relay api`'s connections (a fast restart, terminated sessions, an outage of a few
seconds; private instance): once Postgres is back, every request is answered normally within 2 s, with no
restart of the API, also through a multi-host `RELAY_DATABASE_URL` (`target_session_attrs=read-write`)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg
import pytest
import requests

from devtools.processes import RelayProcess, free_port
from devtools.stack import Stack
from tests.reliability.private_services import PrivateServices

pytestmark = [pytest.mark.faults, pytest.mark.integration]

BACK_WITHIN_S = 2.0  # every request is answered normally this soon after Postgres is back
WARM_CONNECTIONS = 16  # concurrent requests before the fault, so the API's pool holds many connections to lose


@dataclass
class Answer:
    sent: float
    answered: float
    status: int


def _list_batches(api: RelayProcess, key: str) -> Answer:
    sent = time.monotonic()
    try:
        status = requests.get(f"{api.url}/v1/batches", params={"limit": 1}, timeout=40,
                              headers={"Authorization": f"Bearer {key}"}).status_code
    except requests.RequestException:
        status = 0
    return Answer(sent=sent, answered=time.monotonic(), status=status)


def _multi_host_url(services: PrivateServices, name: str) -> str:
    """A URL naming first a host nobody listens on, then the private Postgres: libpq tries them in turn."""
    return (f"postgresql://postgres@127.0.0.1:{free_port()},127.0.0.1:{services.pg_port}/{name}"
            "?target_session_attrs=read-write")


def _warm_api(stack: Stack, services: PrivateServices, **settings: object) -> tuple[RelayProcess, str]:
    api = stack.start_api(database_url=_multi_host_url(services, "relay_faults"), **settings)
    key = stack.new_key("postgres")
    with ThreadPoolExecutor(WARM_CONNECTIONS) as pool:
        answers = list(pool.map(lambda _: _list_batches(api, key), range(WARM_CONNECTIONS * 4)))
    assert {a.status for a in answers} == {200}
    return api, key


def _terminate_sessions(services: PrivateServices) -> None:
    """pg_terminate_backend every session of the database, and wait until they are gone (it only signals them)."""
    with psycopg.connect(services.admin_db_url, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = 'relay_faults'")]
        assert pids
        conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        deadline = time.monotonic() + 10
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
            assert time.monotonic() < deadline, "terminated sessions still there after 10 s"
            time.sleep(0.01)


def _sequential_answers(api: RelayProcess, key: str, seconds: float) -> list[Answer]:
    answers: list[Answer] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answers.append(_list_batches(api, key))
    return answers


def _late_or_failed(answers: list[Answer], back: float) -> list[tuple[float, float, int]]:
    """(sent, answered, status) relative to BACK of each answer not a 200 within BACK_WITHIN_S of
    max(sent, BACK)."""
    return [(round(a.sent - back, 2), round(a.answered - back, 2), a.status) for a in answers
            if a.status != 200 or a.answered > max(a.sent, back) + BACK_WITHIN_S]


@pytest.mark.parametrize("fault", ["fast restart", "terminated sessions"])
def test_once_postgres_drops_the_apis_connections_every_request_is_answered_within_2s(
        private: Stack, private_services: PrivateServices, fault: str) -> None:
    api, key = _warm_api(private, private_services)
    if fault == "fast restart":
        private_services.stop_postgres()
        private_services.start_postgres()
    else:
        _terminate_sessions(private_services)
    back = time.monotonic()

    answers = _sequential_answers(api, key, seconds=6)
    assert not _late_or_failed(answers, back)
    assert len(answers) > 20


def test_requests_made_during_a_postgres_outage_are_answered_within_2s_of_its_return(
        private: Stack, private_services: PrivateServices) -> None:
    """Also the catalog cache's LISTEN connection: a key revoked as Postgres returns is refused within 2 s.

    A pool of two: each lost connection has its own reconnection schedule, and with many the odds that one of
    them falls just after the return hide a backoff grown long."""
    api, key = _warm_api(private, private_services, db_pool_min=1, db_pool_max=2)
    record = private.new_key_record("postgres")
    assert _list_batches(api, str(record["key"])).status == 200
    during: list[Answer] = []
    stop = threading.Event()

    def keep_asking() -> None:
        while not stop.is_set():
            during.append(_list_batches(api, key))
            time.sleep(0.05)

    askers = [threading.Thread(target=keep_asking, daemon=True) for _ in range(4)]
    private_services.stop_postgres()
    for asker in askers:
        asker.start()
    try:
        time.sleep(8)  # every reconnection attempt fails meanwhile (psycopg_pool's own waits grew to 8 s)
        private_services.start_postgres()
        back = time.monotonic()

        private.runtime.pool.check()  # the test's own pool: drop its dead connections before the admin call
        revoked = private.admin("POST", f"/admin/relay-keys/{record['id']}/revoke")
        assert revoked.status_code == 200, revoked.get_data(as_text=True)
        while _list_batches(api, str(record["key"])).status != 401:
            assert time.monotonic() < back + BACK_WITHIN_S, "the API still takes a key revoked as Postgres came back"
            time.sleep(0.05)
        time.sleep(max(0.0, back + BACK_WITHIN_S + 1 - time.monotonic()))
    finally:
        stop.set()
        for asker in askers:
            asker.join(45)
    waited = [a for a in during if a.answered > back]  # requests in flight at the return, and those after it
    assert waited
    assert not _late_or_failed(waited, back)
    assert not _late_or_failed(_sequential_answers(api, key, seconds=1), back)
