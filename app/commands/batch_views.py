"""Batches as `relay batches` and `relay admin-batches` show them to people: a summary of a batch (with a paced
batch's rate and expected finish), tables of items, batches and workers, and the progress line of `submit --wait`.
`--json` prints the API's answers instead."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.commands.output import table, usd
from schemas.batches import ACTIVE_STATES, FINAL_STATES

STATES = (*FINAL_STATES, *reversed(ACTIVE_STATES))  # the order people read: the final states first
ERROR_WIDTH = 70


def batch_state(batch: dict[str, Any]) -> str:
    """What a batch is doing, in one word (its `status` says only queued or cancelled), as the console says it."""
    if batch.get("status") == "cancelled":
        return "cancelled" if batch.get("finished") else "cancelling"
    if batch.get("finished"):
        return "done"
    counts = batch.get("counts")
    if counts is None:
        return "in progress"
    return "running" if sum(counts.get(s, 0) for s in (*FINAL_STATES, "running")) else "queued"


def cost(usage: dict[str, Any] | None, so_far: str | None = None) -> str:
    """`$0.000123` for a finished batch's usage, `unpriced` when no price is known; before it finishes, what its
    final items cost SO_FAR (`$0.000100 so far`), or `—`."""
    if usage is None:
        return f"{usd(so_far)} so far" if so_far and float(so_far) > 0 else "—"
    if usage["cost_usd"] is None:
        return "unpriced"
    return usd(usage["cost_usd"])


def when(stamp: Any) -> str:
    """An RFC 3339 time (or a Unix time) as `2026-01-31 12:00:00Z` (UTC, whole seconds)."""
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        stamp = datetime.fromtimestamp(stamp, UTC).isoformat()
    return "—" if not stamp else str(stamp).replace("T", " ")[:19] + "Z"


def pacing_text(pacing: dict[str, Any]) -> str:
    """A paced batch's rate and expected finish: `paced at 240 items/min (0.5 of the policy's limits), 12 waiting,
    expected finish 2026-01-31 12:00:05Z`, saying when that is past the batch's deadline."""
    rate = pacing.get("items_per_minute")
    speed = f"paced at {rate:g} items/min" if rate is not None else "paced (no limit bounds its rate)"
    finish = pacing.get("expected_finish_at")
    ends = f"expected finish {when(finish)}" if finish is not None else "no expected finish (a limit admits no item)"
    late = " — past its deadline: items not started by then end discarded `expired`" if pacing.get(
        "past_deadline") else ""
    return (f"{speed} ({pacing.get('share', 1):g} of the policy's limits), {pacing.get('waiting_items', 0)} waiting,"
            f" {ends}{late}")


def batch_summary(batch: dict[str, Any]) -> list[str]:
    """The lines that describe one batch: state, counts, times, cost, attribution."""
    counts = batch.get("counts") or {}
    name = (batch.get("metadata") or {}).get("name")
    lines = [f"batch {batch['id']}: {batch_state(batch)}" + (f" — {name}" if name else ""),
             f"  {batch['total']} items ({batch.get('api', 'relay')} API, shape {batch['shape']}): "
             + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATES),
             f"  created {when(batch['created_at'])}, finished {when(batch['finished_at'])}"
             + (f", cancelled {when(batch['cancelled_at'])}" if batch.get("cancelled_at") else "")]
    if batch.get("pacing"):
        lines.append(f"  {pacing_text(batch['pacing'])}")
    limits = [f"spend cap ${batch['max_cost']:g}{CAP_MODES.get(batch.get('max_cost_mode') or '', '')}"
              if batch.get("max_cost") is not None else None,
              f"deadline {when(batch['expires_at'])} ({batch['completion_window']})" if batch.get("expires_at")
              else None,
              f"re-run of {batch['rerun_of']}" if batch.get("rerun_of") else None]
    if any(limits):
        lines.append("  " + ", ".join(text for text in limits if text))
    usage = batch.get("usage")
    if usage is None and float(batch.get("cost_usd") or 0) > 0:
        lines.append(f"  cost {cost(None, batch['cost_usd'])}")
    if usage is not None:
        lines.append(f"  cost {cost(usage)}, tokens {usage['input_tokens']} in / {usage['output_tokens']} out"
                     + (f", {usage['unpriced']} unpriced" if usage["unpriced"] else ""))
    who = [f"{label} {batch[key]}" for label, key in (("policy", "policy"), ("project", "project"),
                                                       ("team", "team"), ("principal", "principal"),
                                                       ("credential", "credential")) if batch.get(key)]
    if who:
        lines.append("  " + ", ".join(who))
    return lines


def items_table(items: list[dict[str, Any]]) -> list[str]:
    """Items as a table (with a custom_id column when the batch has them); error texts cut to one line."""
    keyed = any(item.get("custom_id") for item in items)
    headers = ["IDX", *(["CUSTOM_ID"] if keyed else []), "STATE", "MODEL", "ERROR"]
    rows = [[item["idx"], *([item.get("custom_id")] if keyed else []), item["state"], item.get("model"),
             _one_line(item.get("error"))] for item in items]
    return table(headers, rows)


def batches_table(batches: list[dict[str, Any]], *, admin: bool = False) -> list[str]:
    """A page of batches as a table, newest first."""
    headers = ["ID", "CREATED", *(["PRINCIPAL", "POLICY"] if admin else []), "API", "SHAPE", "STATE", "ITEMS",
               "COST", "NAME"]
    rows = [[b["id"], when(b["created_at"]), *([b.get("principal"), b.get("policy")] if admin else []),
             b.get("api", "relay"), b["shape"], batch_state(b), b["total"], cost(b.get("usage")),
             (b.get("metadata") or {}).get("name")] for b in batches]
    return table(headers, rows)


def fleet_lines(fleet: dict[str, Any]) -> list[str]:
    """The workers, the item queue and where items wait (Postgres before dispatch, then RabbitMQ)."""
    queue, items = fleet["queue"], fleet.get("items") or {}
    depth = (f"{queue['messages']} messages ready, {queue['consumers']} consumers" if queue["reachable"]
             else "RabbitMQ cannot be reached")
    lines = [f"workers: {fleet['alive']} alive of {len(fleet['workers'])} (silent after {fleet['lost_after_s']:g} s)",
             f"queue {queue['name']}: {depth}"]
    if items:
        lines.append(f"items: {items['queued']} queued in Postgres ({items['unpublished']} not yet published to"
                     f" RabbitMQ), {items['running']} running")
    rows = [[w["id"], w["hostname"], w["pid"], "alive" if w["alive"] else "silent", f"{w['seen_ago_s']:.0f} s ago",
             w["running"]] for w in fleet["workers"]]
    return [*lines, *(table(["WORKER", "HOST", "PID", "STATE", "HEARD", "RUNNING"], rows) if rows else [])]


def progress_line(batch: dict[str, Any], width: int = 30, rate: float | None = None) -> str:
    """`[#####.....]  50% 500/1000  41.7/s  ETA 0:12  completed 480  discarded 20  cancelled 0  running 16  queued
    484`; RATE is items made final per second since the submit (no rate or ETA until there is one). A paced batch's
    line ends with its paced rate and expected finish (`  paced 240/min, finish 2026-01-31 12:00:05Z`)."""
    counts, total = batch["counts"], max(1, batch["total"])
    done = final_count(batch)
    speed = f"{rate:.1f}/s  ETA {clock((batch['total'] - done) / rate)}" if rate else "-/s  ETA -"
    parts = "  ".join(f"{s} {counts[s]}" for s in STATES)
    return (f"{_bar(done, batch['total'], width)} {100 * done // total:3d}% {done}/{batch['total']}  {speed}"
            f"  {parts}{_paced(batch.get('pacing'))}")


def fitted_progress_line(batch: dict[str, Any], rate: float | None, columns: int) -> str:
    """The progress line at most COLUMNS wide (a wider one wraps, and each redraw becomes a new line): the full
    line with a narrower bar, then short counts, then the bar, percentage and ETA alone, cut as a last resort."""
    counts, done = batch["counts"], final_count(batch)
    eta = f"ETA {clock((batch['total'] - done) / rate)}" if rate else "ETA -"
    short = (f"ok {counts['completed']} failed {counts['discarded']} run {counts['running']} wait {counts['queued']}"
             + (f" cancelled {counts['cancelled']}" if counts["cancelled"] else ""))
    pct = f"{100 * done // max(1, batch['total']):3d}% {done}/{batch['total']}"
    bar = _bar(done, batch["total"], 10)
    candidates = [progress_line(batch, 30, rate), progress_line(batch, 20, rate), progress_line(batch, 10, rate),
                  f"{bar} {pct}  {eta}  {short}", f"{bar} {pct}  {eta}", f"{pct} {eta}"]
    return next((line for line in candidates if len(line) <= columns), candidates[-1][:max(1, columns)])


def _bar(done: int, total: int, width: int) -> str:
    filled = int(width * done / max(1, total))
    return f"[{'#' * filled}{'.' * (width - filled)}]"


def _paced(pacing: dict[str, Any] | None) -> str:
    if not pacing:
        return ""
    rate = pacing.get("items_per_minute")
    finish = pacing.get("expected_finish_at")
    return (f"  paced {'-' if rate is None else f'{rate:g}'}/min, finish "
            f"{'-' if finish is None else when(finish)}" + (" (past its deadline)" if pacing.get("past_deadline")
                                                            else ""))


def final_count(batch: dict[str, Any]) -> int:
    return sum(batch["counts"][s] for s in FINAL_STATES)


# How a spend cap holds (`max_cost_mode`), in the status's words (`max_cost_overshoot` says it at length).
CAP_MODES = {"hard": " (hard: never passed)", "soft": " (soft: items in flight may pass it)"}


def clock(seconds: float) -> str:
    """`0:07`, `12:30`, `2:05:00`."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _one_line(text: str | None) -> str | None:
    if not text:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= ERROR_WIDTH else flat[:ERROR_WIDTH - 1] + "…"
