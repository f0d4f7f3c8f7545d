"""Rate limits by leases on real processes: two API replicas (two gunicorn workers each) and two worker processes
share one policy's limit, driven past it by live calls and a batch at once. Per window the requests admitted never
exceed the limit; a killed process strands no more than its slice, for that window only; the lease statements are
counted on /metrics and stay far fewer than the admissions (about one per 20). How full each window gets under
demand is a rate, which depends on how busy the machine is: `bench/batches.py`'s `shared_limit` measures it
(target 98%), on the processes `scripts/dev.sh up` starts."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from devtools.cluster.ports import reserve
from devtools.processes import RelayProcess, start_api, start_workers
from devtools.waiting import until
from tests.live.conftest import LEASED, bearer
from tests.observability.helpers import parse, value
from tests.pipeline.helpers import CHAT

pytestmark = pytest.mark.integration
# The `leased` policies' window: long enough that a loaded machine's clients use the whole limit well before its
# end. Two full test runs at once admitted only 65 to 77 calls and items in each of 3 s windows of 200 (no refusal
# to see); a killed process's slice counts as stranded only if the live processes use all the rest.
WINDOW_S = 12


@pytest.fixture(scope="module")
def batch_workers(live_env: dict[str, str], runtime: Any, tmp_path_factory: pytest.TempPathFactory,
                  replicas: list[RelayProcess]) -> Iterator[tuple[RelayProcess, int]]:
    workdir = tmp_path_factory.mktemp("workers")
    [port] = reserve(1, workdir)  # a worker setting, so not port 0: one outside the ephemeral range, claimed
    proc = start_workers({**live_env, "RELAY_WORKER_METRICS_PORT": str(port)}, workdir,
                         runtime, processes=2, threads=8, worker_heartbeat_s=0.5, worker_lost_after_s=5)
    yield proc, port
    proc.stop()


# a call is admitted a moment after it starts (under a loaded machine's parallel tests, well over 50 ms): this close
# to a window's end, it may be the next's
EDGE_S = 0.5
REFUSED_PAUSE_S = 0.05  # a refused client's pause before it calls again (hammer)


def admitted_starts(runtime: Any, since: float, policy: str = "leased") -> list[float]:
    """When each call and batch item of POLICY that passed its rate limit (every event but a
    rate_limited one) started: every key's, as the window is the policy's (a batch of an earlier test may still run
    on a loaded machine)."""
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT extract(epoch FROM e.started_at)::float8 AS t FROM usage_events_full e"
                            " JOIN policies p ON p.id = e.policy_id WHERE p.name = %s"
                            " AND e.started_at >= to_timestamp(%s)"
                            " AND coalesce(e.error_code, '') <> 'rate_limited'", (policy, since)).fetchall()
    return [float(r["t"]) for r in rows]


def admitted_in(starts: list[float], window: int, window_s: int = WINDOW_S) -> tuple[int, int]:
    """(at least, at most) the admissions of WINDOW (its index, in windows of WINDOW_S): those that started well
    inside it, and those that started in it or just before it (in overload, a call that started at the end of the
    window before was refused there or admitted in this one)."""
    begin, end = window * window_s, (window + 1) * window_s
    inside = sum(1 for t in starts if begin <= t < end - EDGE_S)
    around = sum(1 for t in starts if begin - EDGE_S <= t < end)
    return inside, around


def granted_per_window(runtime: Any) -> list[int]:
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT w.requests FROM rate_limit_windows w JOIN policy_rate_limits l ON l.id = w.limit_id"
                            " JOIN policies p ON p.id = l.policy_id WHERE p.name = 'leased'").fetchall()
    return [int(r["requests"]) for r in rows]


def hammer(urls: list[str], key: str, stop: threading.Event, threads: int = 8, *,
           reconnect_refused: bool = False, refused_at: list[float] | None = None) -> list[int]:
    """Live calls from THREADS keep-alive clients spread over URLS until STOP; every status. RECONNECT_REFUSED: a
    client refused a call goes on from a new connection (after REFUSED_PAUSE_S), which a replica's other process
    may accept: a keep-alive client stays on one process, so a process holding the rest of a slice would otherwise
    keep it unused while its peer refuses. REFUSED_AT gets the time each refused call started."""
    statuses: list[int] = []
    refused = refused_at if refused_at is not None else []

    def client(n: int) -> None:
        session = requests.Session()
        try:
            while not stop.is_set():
                sent = time.time()
                try:
                    res = session.post(f"{urls[n % len(urls)]}/v1/chat/completions", json=CHAT, headers=bearer(key),
                                       timeout=30)
                except requests.ConnectionError:  # a kept-alive connection closed as it was reused: go on anew
                    session.close()
                    session = requests.Session()
                    continue
                statuses.append(res.status_code)
                if res.status_code == 429:
                    refused.append(sent)
                    if reconnect_refused:
                        session.close()
                        session = requests.Session()
                        stop.wait(REFUSED_PAUSE_S)
        finally:
            session.close()

    pool = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:  # each ends at STOP
        t.join()
    return statuses


def accepted_key(admin: Any, replicas: list[RelayProcess], policy: str) -> str:
    """A new relay key of POLICY that every replica accepts."""
    res = admin("POST", "/admin/relay-keys", json={"principal_kind": "service_account", "principal": "pipeline-svc",
                                                   "policy": policy})
    assert res.status_code == 201, res.get_data(as_text=True)
    key = str(res.json["key"])
    for api in replicas:
        until(lambda api=api: all(requests.get(f"{api.url}/v1/models", headers=bearer(key), timeout=10)
                                     .status_code == 200 for _ in range(4)), what="the key on every worker")
    return key


def test_live_calls_and_a_batch_on_four_processes_never_pass_a_windows_limit(
        replicas: list[RelayProcess], batch_workers: tuple[RelayProcess, int], admin: Any, runtime: Any) -> None:
    key = accepted_key(admin, replicas, "leased")
    time.sleep(WINDOW_S - time.time() % WINDOW_S)  # start on a window boundary
    started = time.time()
    res = requests.post(f"{replicas[0].url}/v1/batches", headers=bearer(key), timeout=60,
                        json={"shape": "openai", "requests": [CHAT] * 2500})
    assert res.status_code == 202, res.text
    stop = threading.Event()
    threading.Timer(3 * WINDOW_S, stop.set).start()
    refused_at: list[float] = []
    statuses = hammer([api.url for api in replicas], key, stop, reconnect_refused=True, refused_at=refused_at)
    # what is left of it would take later tests' windows (409: it has ended, its items all past the limit)
    assert requests.post(f"{replicas[0].url}/v1/batches/{res.json()['id']}/cancel", headers=bearer(key),
                         timeout=60).status_code in (200, 409)
    assert 200 in statuses  # refusals, of calls or items, are counted below (a loaded run once had no 429 call)
    starts = admitted_starts(runtime, started - 1)
    first = math.floor(started / WINDOW_S + 0.5)
    counts = {w: admitted_in(starts, w) for w in range(first, first + 3)}  # the windows hammered from start to end
    assert max(granted_per_window(runtime)) <= LEASED
    assert all(inside <= LEASED for inside, _ in counts.values()), counts
    # Driven past the limit: calls or items were refused in a window after the first (whose start the batch's
    # submit and the processes' first slices share). How full such windows get is the bench's (shared_limit): on a
    # machine running two test suites at once, 3 s windows with a refusal held 142 to 194 admissions of 200, and in
    # another such run no 3 s window was filled (65 to 77 started well inside each).
    refused_at += refused_items(runtime, res.json()["id"])
    refused_in = {math.floor(t / WINDOW_S) for t in refused_at}
    assert refused_in & (set(counts) - {first}), (counts, sorted(refused_at))


def refused_items(runtime: Any, batch_id: str) -> list[float]:
    """When each item of BATCH_ID that its rate limit refused started."""
    with runtime.pool.connection() as conn:
        rows = conn.execute("SELECT extract(epoch FROM started_at)::float8 AS t FROM batch_items WHERE batch_id = %s"
                            " AND error_code = 'rate_limited' AND started_at IS NOT NULL", (batch_id,)).fetchall()
    return [float(r["t"]) for r in rows]


def test_a_killed_process_strands_at_most_its_slice_and_only_until_its_window_ends(
        live_env: dict[str, str], replicas: list[RelayProcess], admin: Any, runtime: Any,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # The live clients must use all that the live processes hold before the window ends, or what they held would
    # count as stranded (a loaded CI machine admitted 124 in a 3 s window's 2.8 s, with 42 held).
    key = accepted_key(admin, replicas, "leased-killed")
    window_s = WINDOW_S
    doomed = start_api(live_env, tmp_path_factory.mktemp("doomed"), workers=1)
    try:
        until(lambda: requests.get(f"{doomed.url}/v1/models", headers=bearer(key), timeout=10).status_code == 200,
                 what="the key on the new replica")
        time.sleep(window_s - time.time() % window_s + 0.05)
        window_start = time.time()
        with requests.Session() as session:
            for _ in range(5):
                assert session.post(f"{doomed.url}/v1/chat/completions", json=CHAT, headers=bearer(key),
                                    timeout=30).status_code == 200
        # Its five calls' usage events committed first (written just after each answer): a kill before would lose
        # them too, and five admitted calls would count as stranded (a full run at load counted 22 of 20).
        until(lambda: len(admitted_starts(runtime, window_start - 1, "leased-killed")) >= 5,
              what="the killed replica's calls recorded")
        doomed.stop(signal.SIGKILL)
        stop = threading.Event()
        threading.Timer(window_s - (time.time() - window_start) - 0.1, stop.set).start()
        # to the window's end, refused clients reconnecting, so that every live process uses what it holds of the
        # window: what is left unadmitted is then the killed one's
        hammer([api.url for api in replicas], key, stop, reconnect_refused=True)
    finally:
        doomed.stop()
    window = math.floor(window_start / window_s)
    admitted = max(admitted_in(admitted_starts(runtime, window_start - 1, "leased-killed"), window, window_s))
    with runtime.pool.connection() as conn:
        row = conn.execute("SELECT w.requests FROM rate_limit_windows w JOIN policy_rate_limits l ON l.id = w.limit_id"
                           " JOIN policies p ON p.id = l.policy_id WHERE p.name = 'leased-killed'"
                           " AND w.window_start = to_timestamp(%s)", (window * window_s,)).fetchone()
    assert row is not None and int(row["requests"]) <= LEASED
    stranded = int(row["requests"]) - admitted
    assert 0 <= stranded <= 20, (row["requests"], admitted)  # the killed process's unused slice (MIN_SLICE)
    # The next window is whole again for the live processes.
    time.sleep(window_s - time.time() % window_s + 0.05)
    after = time.time()
    stop = threading.Event()
    threading.Timer(window_s - 0.2, stop.set).start()
    hammer([api.url for api in replicas], key, stop, reconnect_refused=True)
    assert admitted_in(admitted_starts(runtime, after - 1, "leased-killed"), math.floor(after / window_s),
                       window_s)[1] >= 0.98 * LEASED


def test_lease_statements_are_counted_and_stay_far_fewer_than_the_admissions(
        replicas: list[RelayProcess], new_key: Callable[[str], str], live_env: dict[str, str]) -> None:
    key = new_key("wide")
    before = [parse(_metrics(api, live_env)) for api in replicas]
    stop = threading.Event()
    threading.Timer(4.0, stop.set).start()
    statuses = hammer([api.url for api in replicas], key, stop)
    assert set(statuses) == {200}
    after = [parse(_metrics(api, live_env)) for api in replicas]
    admitted = sum(value(a, "relay_rate_limit_admitted_total", consumer="live")
                   - value(b, "relay_rate_limit_admitted_total", consumer="live") for a, b in zip(after, before))
    statements = sum(value(a, "relay_rate_limit_lease_statements_total", consumer="live")
                     - value(b, "relay_rate_limit_lease_statements_total", consumer="live")
                     for a, b in zip(after, before))
    assert admitted >= len(statuses)  # every call passed the limiter (the metric is the multiprocess sum)
    # about one per 20 on a quiet machine; a loaded one renews more slices that expire unused. Only a lease that
    # stopped batching (a statement per admission) crosses this bound.
    assert 0 < statements <= admitted / 5 + 4, (statements, admitted)  # + each worker's first slice


def _metrics(api: RelayProcess, env: dict[str, str]) -> str:
    res = requests.get(f"{api.url}/metrics", headers=bearer(env["RELAY_ADMIN_TOKEN"]), timeout=10)
    assert res.status_code == 200
    return res.text
