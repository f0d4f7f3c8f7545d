"""What the benchmarks read from /proc: CPU time and memory of process trees, Postgres and RabbitMQ pids."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import psycopg

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """ROOT and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat_fields(int(entry.name))
        if stat is not None:
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if _stat_fields(pid) is None:
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User + system CPU seconds of each live pid (all its threads)."""
    out = {}
    for pid in pids:
        stat = _stat_fields(pid)
        if stat is not None:
            out[pid] = (int(stat[11]) + int(stat[12])) * TICK_S
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two samples (a pid born in between counts from zero)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def memory_kb(pid: int, field: str) -> int:
    """A /proc/PID/status field in kB: VmRSS (now) or VmHWM (peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def postgres_pids(conn: psycopg.Connection, database: str) -> list[int]:
    """The backends serving DATABASE (except this connection's) plus Postgres' own background processes."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE (datname = %s AND pid <> pg_backend_pid())"
        " OR backend_type NOT IN ('client backend', 'autovacuum worker', 'parallel worker')",
        (database,)).fetchall()
    return [int(r[0] if isinstance(r, tuple) else r["pid"]) for r in rows]


def rabbitmq_pids(services_dir: Path) -> list[int]:
    """The Erlang VM running the local RabbitMQ of SERVICES_DIR (every beam.smp when none matches)."""
    mine, every = [], []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "beam.smp":
                continue
            every.append(int(entry.name))
            if str(services_dir / "rabbitmq") in (entry / "cmdline").read_bytes().decode(errors="replace"):
                mine.append(int(entry.name))
        except OSError:
            continue
    return mine or every


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (index 0 = state, 1 = ppid, 11 = utime, 12 = stime)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()
