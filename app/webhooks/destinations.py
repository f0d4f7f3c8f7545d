"""Where a webhook may go. A batch's callback_url only to hosts the operator allows (RELAY_WEBHOOK_ALLOWED_HOSTS),
checked at submit; and before every attempt, every address the destination's host resolves to must be public
unless the operator allows its network (RELAY_WEBHOOK_ALLOWED_NETWORKS): every block of IANA's special-purpose
registries (loopback, link-local, private, shared, documentation, 6to4, site-local, ...: special_addresses),
multicast, reserved and cloud-metadata addresses are refused. The attempt then connects to the address that was
checked, never resolving again (no DNS rebinding between check and connect)."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.errors import BadRequest
from app.host_rules import METADATA, HostRules, IPAddress
from app.webhooks.special_addresses import reached, special_purpose
from schemas.webhooks import url_problem


class CallbackUrlNotAllowed(BadRequest):
    """A callback_url whose host the operator does not allow (or that is not an http(s) URL)."""

    code = "callback_url_not_allowed"


class DestinationRefused(Exception):
    """A delivery's destination may not be reached; the message says why (no retry: it is configuration)."""


def check_callback_url(url: str, allowed: HostRules) -> str:
    """URL, when a batch may name it as its callback; CallbackUrlNotAllowed (400) otherwise."""
    problem = url_problem(url)
    if problem:
        raise CallbackUrlNotAllowed(message=f"callback_url {problem}")
    host = urlsplit(url).hostname or ""
    if not allowed.allows_host(host):
        raise CallbackUrlNotAllowed(message=f"callback_url: the host {host[:200]!r} is not one this Relay allows"
                                            " (RELAY_WEBHOOK_ALLOWED_HOSTS)")
    return url


@dataclass(frozen=True)
class Target:
    """A checked destination: the URL's parts and the one address to connect to."""

    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent on the request line
    address: str


def resolve_target(url: str, allowed: HostRules) -> Target:
    """The checked Target of URL; DestinationRefused when the URL, or any address its host resolves to, may not be
    reached (an address that cannot be resolved is a network error, OSError, retried like one)."""
    problem = url_problem(url)
    if problem:
        raise DestinationRefused(f"the URL {problem}")
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for text in addresses:
        reason = refusal(ipaddress.ip_address(text.split("%")[0]), allowed)
        if reason:
            raise DestinationRefused(f"{host} resolves to {text}, {reason} (RELAY_WEBHOOK_ALLOWED_NETWORKS)")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, path, addresses[0])


def refusal(address: IPAddress, allowed: HostRules) -> str | None:
    """Why a delivery may not connect to ADDRESS; None when it may (public, or in an allowed network)."""
    address = reached(address)
    if allowed.allows_address(address):
        return None
    if address in METADATA:
        return "a cloud metadata address"
    reason = special_purpose(address)
    if reason is None and (not address.is_global or address.is_multicast or address.is_reserved):
        reason = "not a public address"  # what this Python's own tables add to the registries'
    return reason

