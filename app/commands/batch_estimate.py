"""The estimate `relay batches submit` prints before it submits (and `relay batches estimate` prints alone), and the
confirmation rule before a large spend.

The rule: a submit whose cost bound (the estimate's `cost_usd_max`) is above `--confirm-above` dollars (default
DEFAULT_CONFIRM_ABOVE, or $RELAY_CONFIRM_ABOVE) needs a yes. On a terminal (standard input a TTY, and the file not
`-`) the command asks and submits only on `y`/`yes`; anywhere else (a script, a pipe) it never waits for an answer:
it refuses with `confirmation_required` (exit 1, nothing stored). `--yes` submits without asking. A batch whose cost
has no bound (unpriced models, items without an output limit) is above any threshold: it is asked about the same
way, unless `--max-cost` caps it.
"""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal, InvalidOperation
from typing import IO, Any

from app.commands.batch_views import clock
from app.commands.output import table, usd
from app.errors import RelayError
from app.settings import ClientSettings

DEFAULT_CONFIRM_ABOVE = Decimal("1.00")


class ConfirmationRequired(RelayError):
    """The cost bound is above the threshold and no one can be asked (no terminal) and `--yes` was not given."""

    code = "confirmation_required"


class InvalidConfirmAbove(RelayError):
    """$RELAY_CONFIRM_ABOVE is not an amount of dollars."""

    code = "invalid_confirm_above"


class NotConfirmed(RelayError):
    """The person at the terminal said no."""

    code = "not_confirmed"


def dollars(text: str) -> Decimal:
    """`--confirm-above` and `--max-cost`: a non-negative amount of dollars."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not an amount of dollars: {text!r} (e.g. 5 or 0.25)") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"not an amount of dollars: {text!r} (e.g. 5 or 0.25)")
    return value


def confirm_above(args: argparse.Namespace) -> Decimal:
    """`--confirm-above`, else $RELAY_CONFIRM_ABOVE, else DEFAULT_CONFIRM_ABOVE."""
    if args.confirm_above is not None:
        return args.confirm_above  # type: ignore[no-any-return]
    raw = ClientSettings.from_env().confirm_above
    try:
        return dollars(raw) if raw else DEFAULT_CONFIRM_ABOVE
    except argparse.ArgumentTypeError as exc:
        raise InvalidConfirmAbove(message=f"RELAY_CONFIRM_ABOVE: {exc}") from None


def estimate_lines(estimate: dict[str, Any]) -> list[str]:
    """The estimate for people: items per model (where they run, or why they would not), the cost bound against
    the cap, and the timing under the policy's limits, paced and not."""
    rows = [[m["model"], m["items"], _where(m), usd(m["cost_usd_max"]) if m.get("cost_usd_max") is not None
             else ("unpriced" if m["runs"] and not m["priced"] else "no bound" if m["runs"] else "—")]
            for m in estimate["models"]]
    lines = [f"estimate: {estimate['total']} items, shape {estimate['shape']} (nothing is stored or run yet)",
             *("  " + line for line in table(["MODEL", "ITEMS", "RUNS ON", "COST AT MOST"], rows)),
             "  " + _cost(estimate)]
    return [*lines, *("  " + line for line in timing_lines(estimate.get("timing"))),
            *("  " + line for line in deadline_lines(estimate.get("deadline")))]


def _where(model: dict[str, Any]) -> str:
    if not model["runs"]:
        problem = model.get("problem") or {}
        return f"not run: {problem.get('code', 'discarded')}"
    binding = model.get("binding") or {}
    return f"{binding.get('host')}/{binding.get('upstream_model')}" if binding else "—"


def _cost(estimate: dict[str, Any]) -> str:
    tokens = f"input ≤ {estimate['input_tokens_max']} tokens, output ≤ {estimate['output_tokens_max']} tokens"
    if estimate.get("cost_usd_max") is None:
        unbounded = sum(m.get("items_without_output_limit", 0) for m in estimate["models"] if m["runs"])
        unpriced = [m["model"] for m in estimate["models"] if m["runs"] and not m["priced"]]
        why = ([f"unpriced: {', '.join(unpriced)}"] if unpriced else []) + (
            [f"{unbounded} items have no output limit (max_tokens, or the model's max_output_tokens)"]
            if unbounded else [])
        text = f"cost: no upper bound ({'; '.join(why) or 'unknown'}); --max-cost caps it"
    else:
        text = f"cost at most {usd(estimate['cost_usd_max'])} ({tokens})"
    cap = estimate.get("max_cost")
    if cap is not None:
        within = estimate.get("within_max_cost")
        mode = estimate.get("max_cost_mode")
        verdict = ("" if within is None else ": the bound stays within it" if within
                   else ": the cap may stop the batch (items end `budget_exceeded`)")
        text += f"; spend cap ${cap:g}{f' ({mode})' if mode else ''}{verdict}"
    return text


def timing_lines(timing: dict[str, Any] | None) -> list[str]:
    """How long the items take under the policy's limits today: paced (how long until the last one starts) and not
    (how many the current windows would discard `rate_limited`); the policy's own way first."""
    if timing is None:
        return []
    if not timing["limited"]:
        return ["timing: your policy has no rate limits: every item starts as fast as the workers take it"]
    seconds, rate = timing.get("paced_seconds"), timing.get("items_per_minute")
    paced = (f"paced ({timing['share']:g} of the limits{f', {rate:g} items/min' if rate is not None else ''}): "
             + ("a limit admits no batch item, so it would never finish" if seconds is None
                else f"the last item starts in about {clock(seconds)}"))
    refused = timing["unpaced_rate_limited_items"]
    unpaced = ("not paced: every item starts at once; "
               + (f"{refused} of {timing['items']} would be discarded `rate_limited` by the current windows"
                  if refused else "the current windows refuse none"))
    if timing["policy_paced"]:
        return [f"timing (your policy paces batches): {paced}", f"  (were it {unpaced})"]
    return [f"timing (your policy does not pace batches): {unpaced}", f"  (were it {paced})"]


def deadline_lines(deadline: dict[str, Any] | None) -> list[str]:
    """Whether every item can start within the batch's completion window under the policy's limits today (an item
    not started by then ends discarded `expired`); nothing without a window."""
    if deadline is None:
        return []
    window = f"deadline {deadline['completion_window']}"
    if deadline["meets"]:
        return [f"{window}: every item can start within it"]
    last = deadline.get("last_start_seconds")
    when = "the last would never start" if last is None else f"the last would start in about {clock(last)}"
    return [f"{window}: WARNING: {deadline['items_late']} items would start too late and end discarded `expired`"
            f" ({when})"]


def needs_confirmation(estimate: dict[str, Any] | None, above: Decimal) -> bool:
    """A bound above ABOVE, or no bound and no spend cap (None: an API without estimates, nothing to go on)."""
    if estimate is None:
        return False
    bound = estimate.get("cost_usd_max")
    if bound is None:
        return estimate.get("max_cost") is None
    return Decimal(str(bound)) > above


def confirm(args: argparse.Namespace, estimate: dict[str, Any] | None, *, interactive: bool,
            out: IO[str] = sys.stderr) -> None:
    """Go on, or raise: the rule of the module's docstring."""
    above = confirm_above(args)
    if args.yes or not needs_confirmation(estimate, above):
        return
    assert estimate is not None  # needs_confirmation said so
    bound = estimate["cost_usd_max"]
    if not interactive:
        why = (f"may cost up to {usd(bound)}, above --confirm-above {usd(above)}," if bound is not None else
               "has no upper bound on its cost (see the estimate; --max-cost caps it),")
        raise ConfirmationRequired(message=f"the batch {why} and there is no terminal to ask: pass --yes to submit"
                                           " it; nothing was submitted")
    cost = f"for up to {usd(bound)}" if bound is not None else "with NO upper bound on their cost"
    out.write(f"Submit {estimate['total']} items {cost}? [y/N] ")
    out.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise NotConfirmed(message="nothing was submitted")
