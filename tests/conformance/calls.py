"""HTTP calls to a real `relay api` for the conformance tests: each answer carries the request id header the
caller's SDK reads (OpenAI's `x-request-id`, Anthropic's `request-id`), and every 429 a `retry-after`."""

from __future__ import annotations

from typing import Any

import requests

WAIT_S = 60  # a generous bound on a batch's run: only a hang crosses it


class Api:
    """Calls to BASE with CREDENTIAL in HEADER, checking the headers every answer must carry."""

    def __init__(self, base: str, credential: str, *, anthropic: bool = False) -> None:
        self.base = base
        self.anthropic = anthropic
        self.headers = {"x-api-key": credential, "anthropic-version": "2023-06-01"} if anthropic else \
            {"Authorization": f"Bearer {credential}"}

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        res = requests.request(method, self.base + path, headers={**self.headers, **kwargs.pop("headers", {})},
                               timeout=WAIT_S, **kwargs)
        request_id = "request-id" if self.anthropic else "x-request-id"
        assert res.headers.get(request_id), (method, path, res.status_code, dict(res.headers))
        if res.status_code == 429:
            assert int(res.headers["retry-after"]) >= 0, dict(res.headers)
        return res

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON body of a 200 answer."""
        res = self.call(method, path, **kwargs)
        assert res.status_code == 200, (method, path, res.status_code, res.text[:500])
        return res.json()


