"""The caller behind the current request, for routes that take relay keys and inference tokens."""

from __future__ import annotations

from flask import current_app, request

from app.auth import authenticate, credential_from_headers
from app.auth_model import Caller


def request_caller() -> Caller:
    """Authenticate this request's `Authorization: Bearer` or `x-api-key` credential (401 if it fails)."""
    return authenticate(current_app.extensions["relay"], credential_from_headers(request.headers) or "")
