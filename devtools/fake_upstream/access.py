"""Who is calling and whether the fake upstream lets the call through: keys, version header, injected errors."""

from __future__ import annotations

from collections.abc import Mapping

from devtools.fake_upstream.behaviour import Behaviour, ServerOptions
from devtools.fake_upstream.errors import ANTHROPIC, InvalidRequest, UpstreamError

_OPENAI_SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"


def request_key(headers: Mapping[str, str], family: str) -> str | None:
    """The API key of a call: `x-api-key` (Anthropic only) or `Authorization: Bearer KEY`."""
    if family == ANTHROPIC and headers.get("x-api-key"):
        return headers["x-api-key"]
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def mask_key(key: str) -> str:
    """The key as OpenAI shows it in errors: never the whole secret."""
    return key[:3] + "*" * 8 + key[-4:] if len(key) > 10 else "*" * len(key)


def _unauthorized(family: str, key: str | None) -> UpstreamError:
    """The 401 for a missing or refused key."""
    if family == ANTHROPIC:
        return UpstreamError(401, "invalid x-api-key" if key else "x-api-key header is required")
    if key is None:
        return UpstreamError(401, "You didn't provide an API key. You need to provide your API key in an "
                                  "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    return UpstreamError(401, f"Incorrect API key provided: {mask_key(key)}. You can find your API key at "
                              "https://platform.openai.com/account/api-keys.", code="invalid_api_key")


def _rate_limited(family: str, behaviour: Behaviour, status: int = 429) -> UpstreamError:
    """The 429 of a `rate_limited` key, with `retry-after`."""
    seconds = behaviour.retry_after
    headers = {"retry-after": str(seconds), "retry-after-ms": str(seconds * 1000)}
    if family == ANTHROPIC:
        message = "Number of requests has exceeded your rate limit (fake upstream). Please try again later."
        return UpstreamError(status, message, headers=headers)
    return UpstreamError(status, f"Rate limit reached for requests (fake upstream). Please try again in {seconds}s.",
                         code="rate_limit_exceeded", headers=headers)


def _failure(family: str, behaviour: Behaviour) -> UpstreamError:
    """The error of a `fail` key (status `fail_status`)."""
    status = behaviour.fail_status
    if status == 429:
        return _rate_limited(family, behaviour)
    if family == ANTHROPIC:
        return UpstreamError(status, "Overloaded" if status == 529 else f"Internal server error (fake {status})")
    if status == 500:
        return UpstreamError(status, _OPENAI_SERVER_ERROR)
    return UpstreamError(status, f"Fake upstream failure (HTTP {status}).")


def per_second_limit(family: str, behaviour: Behaviour, count: int, left_s: float) -> dict[str, str]:
    """A `max_rps` key: OpenAI's x-ratelimit-* headers for the current second, or its 429 past the limit
    (retry-after-ms: until the next second)."""
    limit = behaviour.max_rps
    headers = {"x-ratelimit-limit-requests": str(limit),
               "x-ratelimit-remaining-requests": str(max(0, limit - count)),
               "x-ratelimit-reset-requests": f"{int(left_s * 1000)}ms"}
    if count > limit:
        headers |= {"retry-after-ms": str(max(1, int(left_s * 1000))), "retry-after": "1"}
        error = _rate_limited(family, behaviour)
        error.headers = headers
        raise error
    return headers


def check_access(family: str, headers: Mapping[str, str], key: str | None, behaviour: Behaviour,
                 options: ServerOptions) -> None:
    """Raise the error the call gets before its body is looked at: auth, version header, injected errors."""
    if (key is None and not options.allow_missing_key) or behaviour.mode == "invalid":
        raise _unauthorized(family, key)
    if family == ANTHROPIC and "anthropic-version" not in headers:
        raise InvalidRequest("anthropic-version: header is required")
    if behaviour.mode == "rate_limited":
        raise _rate_limited(family, behaviour)
    if behaviour.mode == "fail":
        raise _failure(family, behaviour)
