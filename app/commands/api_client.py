"""The `relay batches` and `relay admin-batches` commands' HTTP client of a Relay API: one call, API errors as
ApiError with the API's code, message and details, and the retries of a live view (`submit --wait`) that must
outlive an API restart."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import IO, Any, TypeVar

import requests

from app.errors import RelayError

T = TypeVar("T")
# Answers worth asking again in a live view: the API restarting or overloaded, not a refusal of the request.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
UNREACHABLE = 0  # ApiError.status when no answer came at all


class ApiError(RelayError):
    """The Relay API answered with an error (its code, message and details are passed through), or did not
    answer (status UNREACHABLE)."""

    code = "api_error"

    @property
    def transient(self) -> bool:
        return self.status == UNREACHABLE or self.status in TRANSIENT_STATUSES


class MissingKey(ApiError):
    code = "missing_key"


class MissingToken(ApiError):
    code = "missing_token"


class ApiUnreachable(ApiError):
    code = "api_unreachable"


def call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    """One call's JSON answer."""
    return request(args, method, path, **kwargs).json()


def request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> requests.Response:
    """One HTTP call to the Relay API with ARGS.key as the bearer credential; API errors become ApiError."""
    if not args.key:
        raise MissingKey(message="pass --key or set RELAY_KEY")
    headers = {"authorization": f"Bearer {args.key}", **kwargs.pop("headers", {})}
    try:
        response = requests.request(method, args.url.rstrip("/") + path, headers=headers, timeout=300, **kwargs)
    except requests.RequestException as exc:
        raise ApiUnreachable(message=f"cannot reach the Relay API at {args.url}: {_reason(exc)}",
                       status=UNREACHABLE) from exc
    if response.status_code >= 400:
        raise _error_of(response)
    return response


def _error_of(response: requests.Response) -> ApiError:
    try:
        error = response.json()["error"]
        code, message, details = str(error["code"]), str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError):
        code, message, details = "http_error", f"HTTP {response.status_code}", None
    return ApiError(message, code=code, details=details, status=response.status_code)


def _reason(exc: requests.RequestException) -> str:
    """The innermost cause of a connection failure, in a few words (`Connection refused`), not urllib3's repr."""
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    text = str(cause)
    return text.rsplit("] ", 1)[-1] if "] " in text else text or type(cause).__name__


def hint_for_admin_token(args: argparse.Namespace, exc: ApiError) -> ApiError:
    """EXC, with a hint when `relay batches` was given the admin token (refused as `invalid_credential`): the
    admin routes would take it, so say which command does."""
    if exc.code != "invalid_credential":
        return exc
    try:
        request(args, "GET", "/admin/batches", params={"limit": 1})
    except ApiError:
        return exc
    return ApiError(f"{exc.message}: this is the admin token, which reads every owner's batches with"
                    " `relay admin-batches`; `relay batches` takes a relay key (rk_...) or an inference"
                    " token (rt_...)", code=exc.code, details=exc.details, status=exc.status)


def with_retries(attempt: Callable[[], T], *, doing: str, give_up_after_s: float, out: IO[str] = sys.stderr,
                 first_delay_s: float = 0.5, longest_delay_s: float = 10.0) -> T:
    """ATTEMPT(), asked again after a transient failure (no answer, 429, 5xx) with growing pauses, each told on OUT
    with what is being done (DOING); the failure is raised once the API has failed for GIVE_UP_AFTER_S."""
    delay, failing_since = first_delay_s, None
    while True:
        try:
            value = attempt()
        except ApiError as exc:
            if not exc.transient:
                raise
            now = time.monotonic()
            first, failing_since = failing_since is None, now if failing_since is None else failing_since
            if now - failing_since >= give_up_after_s:
                raise ApiError(f"{exc.message} (for {now - failing_since:.0f} s; {doing})", code=exc.code,
                               details=exc.details, status=exc.status) from exc
            out.write(("\n" if first else "") + f"relay: {exc.message}; {doing}; asking again in {delay:g} s\n")
            out.flush()
            time.sleep(delay)
            delay = min(delay * 2, longest_delay_s)
            continue
        if failing_since is not None:
            out.write(f"relay: the Relay API answers again (after {time.monotonic() - failing_since:.0f} s)\n")
        return value
