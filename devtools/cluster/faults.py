"""The faults of the cluster tests, each run during one batch on two worker groups: what the tests check afterwards
and what the cluster bench times (bench/cluster.py). Times are the database's clock, comparable with finished_at."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

from app.settings import Settings
from devtools.cluster.harness import Cluster, ClusterStack, TcpProxy, db_now
from devtools.cluster.pgnodes import PrimaryWatch
from devtools.processes import RelayProcess
from devtools.stack import upstream_key


@dataclass
class Pace:
    """The batch of a fault run: ITEMS items of SCENARIO (its policy, upstream key and message tag), the upstream's
    latency while the fault lasts and after it, the threads of each worker group, and how many items complete
    before the fault."""

    scenario: str
    items: int
    during_ms: int
    after_ms: int
    threads: int = 8
    warmup: int = 100

    def slow(self, stack: ClusterStack) -> None:
        stack.upstream.control(upstream_key(self.scenario), latency_ms=self.during_ms)

    def fast(self, stack: ClusterStack) -> None:
        stack.upstream.control(upstream_key(self.scenario), latency_ms=self.after_ms)


@dataclass
class Fault:
    """One fault run: its batch and key, when the fault began and ended, and what the run noted on the way."""

    batch_id: str
    key: str
    began: float
    ended: float
    notes: dict[str, Any] = field(default_factory=dict)


def _start(stack: ClusterStack, pace: Pace) -> tuple[str, str]:
    """Submit the batch; (key, batch id) once the pace's warm-up items are completed."""
    key = stack.new_key(pace.scenario)
    batch_id = stack.submit(key, pace.scenario, pace.items)
    stack.wait_items(batch_id, ("completed",), min(pace.warmup, pace.items // 5))
    return key, batch_id


def kill_queue_leader(stack: ClusterStack, cluster: Cluster, pace: Pace, down_s: float = 7, moved_at_least: int = 0,
                      moved_wait_s: float = 60) -> Fault:
    """SIGKILL the node leading the item queue for DOWN_S, then start it again. Worker group A lists that node
    first (it must move), B another one (its dispatcher, which publishes through its first node, keeps going).
    With MOVED_AT_LEAST, the node stays down past DOWN_S until group A has started that many items through another
    node, for at most MOVED_WAIT_S more (a loaded machine once took longer than DOWN_S to move it)."""
    pace.slow(stack)
    queue = stack.settings.queue_name
    leader = cluster.leader(queue)
    a = stack.start_worker(pace.threads, **cluster.broker_settings(leader))
    stack.start_worker(pace.threads, **cluster.broker_settings(leader % 3 + 1))
    _, a_id = stack.worker_process(a)
    key, batch_id = _start(stack, pace)
    cluster.kill(f"rabbit{leader}")
    began = db_now(stack)
    time.sleep(down_s)
    give_up = time.monotonic() + moved_wait_s
    while True:
        moved = stack.item_rows(batch_id, "worker_id = %s AND started_at > to_timestamp(%s)", a_id, began + 2)
        if len(moved) >= moved_at_least or time.monotonic() > give_up:
            break
        time.sleep(0.5)
    notes = {"leader": leader, "new_leader": cluster.leader(queue), "moved": moved}
    cluster.start(f"rabbit{leader}")
    ended = db_now(stack)
    pace.fast(stack)
    return Fault(batch_id, key, began, ended, notes)


def fail_over_postgres(stack: ClusterStack, cluster: Cluster, pace: Pace) -> Fault:
    """SIGKILL the primary's node (its keeper and Postgres, the process group: its machine dies) with two APIs and
    two worker groups on the multi-host URL; the monitor promotes a synchronous secondary, no human step. Notes: the
    final states read from the primary just before, the APIs, the old and the new primary."""
    pace.slow(stack)
    apis = stack.start_apis(2)
    # Relay's own lost-after time (15 s), not the fault stack's 5 s: after the failover every worker reconnects, and
    # the first one back judges the others once its own beats have been steady that long. With 5 s, under two test
    # runs at once, a live worker group's item was judged lost (it had not beaten again in time).
    lost_after = {"worker_lost_after_s": Settings.worker_lost_after_s}
    stack.start_worker(pace.threads, **cluster.broker_settings(2), **lost_after)
    stack.start_worker(pace.threads, **cluster.broker_settings(3), **lost_after)
    key, batch_id = _start(stack, pace)
    committed = {int(r["idx"]): str(r["state"]) for r in
                 stack.item_rows(batch_id, "state IN ('completed', 'discarded', 'cancelled')")}
    began = db_now(stack)
    old, new = cluster.fail_over()
    ended = db_now(stack)
    pace.fast(stack)
    return Fault(batch_id, key, began, ended, {"committed": committed, "apis": apis, "old_primary": old,
                                               "new_primary": new})


def kill_standby(stack: ClusterStack, cluster: Cluster, pace: Pace) -> Fault:
    """SIGKILL a synchronous secondary's node (its keeper and Postgres: its machine dies) while two worker groups
    drain the batch, and keep it down until the batch is final: writes must go on without it. Notes: the standby
    and whether it was still down when the batch was final."""
    pace.slow(stack)
    stack.start_worker(pace.threads, **cluster.broker_settings(2))
    stack.start_worker(pace.threads, **cluster.broker_settings(3))
    key, batch_id = _start(stack, pace)
    standby = next(node for node in cluster.members() if node != cluster.primary())
    began = db_now(stack)
    cluster.kill(f"pg-{standby}")
    pace.fast(stack)
    stack.wait_finished(key, batch_id, timeout=240)
    ended = db_now(stack)
    down = cluster.role(standby) == "down"
    cluster.start(f"pg-{standby}")
    return Fault(batch_id, key, began, ended, {"standby": standby, "down_until_final": down})


def restart_old_primary(stack: ClusterStack, cluster: Cluster, pace: Pace) -> Fault:
    """SIGKILL the primary's node (its keeper and Postgres: its machine dies) mid-batch, let the monitor promote a
    secondary, then start the old primary again while the batch drains, with a PrimaryWatch sampling every data
    node throughout. Notes: the old and new primary, the watch."""
    pace.slow(stack)
    stack.start_apis(2)
    stack.start_worker(pace.threads, **cluster.broker_settings(2))
    stack.start_worker(pace.threads, **cluster.broker_settings(3))
    key, batch_id = _start(stack, pace)
    old = cluster.primary()
    with PrimaryWatch(cluster, stack.settings.database_url) as watch:
        began = db_now(stack)
        cluster.kill(f"pg-{old}")
        new = cluster.primary(timeout=120, other_than=old)
        cluster.start(f"pg-{old}")
        cluster.wait_healthy()  # the old primary streams to the new one as a synchronous secondary
        pace.fast(stack)
        stack.wait_finished(key, batch_id, timeout=240)
        ended = db_now(stack)
    return Fault(batch_id, key, began, ended, {"old_primary": old, "new_primary": new, "watch": watch})


def cut_from_broker(stack: ClusterStack, cluster: Cluster, pace: Pace, cut_s: float = 10) -> Fault:
    """Cut one worker group from its only RabbitMQ node (a proxy; a 2 s AMQP heartbeat) for CUT_S while its items
    run. Notes: the cut worker (process, id)."""
    pace.slow(stack)
    proxy = TcpProxy(cluster.mq_port(1))
    try:
        broker_url = proxy.url_for(cluster.broker_settings(1)["broker_url"]) + "?heartbeat=2"
        cut = stack.start_worker(pace.threads, broker_url=broker_url, broker_failover_urls="")
        stack.start_worker(pace.threads, **cluster.broker_settings(2))
        _, cut_id = stack.worker_process(cut)
        key, batch_id = _start(stack, pace)
        stack.wait_for_running(batch_id, cut_id)
        began, ended = _cut_for(stack, proxy, pace, cut_s, key, batch_id)
    finally:
        proxy.close()
    return Fault(batch_id, key, began, ended, {"worker": cut, "worker_id": cut_id})


def cut_from_database(stack: ClusterStack, cluster: Cluster, pace: Pace, cut_s: float = 15) -> Fault:
    """Cut one worker group from Postgres (a proxy to the primary) for CUT_S, once it runs items whose requests the
    upstream has received. Notes: those items ("sent") and the cut worker's id."""
    pace.slow(stack)
    proxy = TcpProxy(cluster.pg_port(cluster.primary()))
    try:
        cut = stack.start_worker(pace.threads, database_url=proxy.url_for(cluster.node_url(cluster.primary())),
                                 **cluster.broker_settings(2))
        stack.start_worker(pace.threads, **cluster.broker_settings(3))
        _, cut_id = stack.worker_process(cut)
        key, batch_id = _start(stack, pace)
        sent = _running_and_sent(stack, batch_id, cut_id, pace.scenario, at_least=pace.threads // 2)
        began, ended = _cut_for(stack, proxy, pace, cut_s, key, batch_id)
    finally:
        proxy.close()
    return Fault(batch_id, key, began, ended, {"sent": sent, "worker_id": cut_id})


def _cut_for(stack: ClusterStack, proxy: TcpProxy, pace: Pace, cut_s: float, key: str,
             batch_id: str) -> tuple[float, float]:
    """Cut PROXY for CUT_S, heal it, let the batch finish at the fast pace; (began, ended)."""
    proxy.cut()
    began = db_now(stack)
    time.sleep(cut_s)
    ended = db_now(stack)
    proxy.heal()
    pace.fast(stack)
    stack.wait_finished(key, batch_id, timeout=240)
    return began, ended


def _running_and_sent(stack: ClusterStack, batch_id: str, worker_id: str, tag: str, at_least: int,
                      timeout: float = 30) -> list[int]:
    """Wait until WORKER_ID runs AT_LEAST items of the batch whose requests the upstream has received; their idxs."""
    deadline = time.monotonic() + timeout
    while True:
        running = {r["idx"] for r in stack.item_rows(batch_id, "state = 'running' AND worker_id = %s", worker_id)}
        sent = sorted(running & set(stack.upstream_calls(tag)))
        if len(sent) >= at_least:
            return sent
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker_id} has {len(sent)} items upstream, wanted {at_least}")
        time.sleep(0.05)


def rolling_restart(stack: ClusterStack, cluster: Cluster, pace: Pace) -> Fault:
    """Restart both APIs, then both worker groups, one at a time (SIGTERM to the main process, wait for it to exit,
    start it again). Notes: the worker groups' exit codes and the items final when the last one was back."""
    pace.slow(stack)
    apis = stack.start_apis(2)
    workers = {node: stack.start_worker(pace.threads, **cluster.broker_settings(node)) for node in (2, 3)}
    key, batch_id = _start(stack, pace)
    began = db_now(stack)
    for i, old in enumerate(apis):  # the other replica serves meanwhile
        stack.http.close()  # an idle keep-alive connection would hold the API's stop for its 15 s keep-alive
        _stop(stack, old)
        stack.api_urls[i] = stack.start_api().url
    exits = []
    for node, old in workers.items():  # the other worker group runs the batch meanwhile
        exits.append(_stop(stack, old))
        stack.start_worker(pace.threads, **cluster.broker_settings(node))
    ended = db_now(stack)
    done = stack.count_items(batch_id, "completed", "discarded", "cancelled")
    pace.fast(stack)
    return Fault(batch_id, key, began, ended, {"exits": exits, "final_when_back": done})


def _stop(stack: ClusterStack, proc: RelayProcess) -> int | None:
    proc.stop(signal.SIGTERM)
    stack.processes.remove(proc)
    return proc.proc.returncode
