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
from app.webhooks.special_addresses import reached, special_purpose
from schemas.webhooks import url_problem

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Instance metadata services (AWS, ECS, GCP and Azure on 169.254.169.254; AWS IPv6; Alibaba; Oracle's DNS): refused
# unless an allowed network names the address itself.
METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.169.253", "fd00:ec2::254", "100.100.100.200"))


class CallbackUrlNotAllowed(BadRequest):
    """A callback_url whose host the operator does not allow (or that is not an http(s) URL)."""

    code = "callback_url_not_allowed"


class DestinationRefused(Exception):
    """A delivery's destination may not be reached; the message says why (no retry: it is configuration)."""


@dataclass(frozen=True)
class HostRules:
    """Host names (exact, or `*.suffix`), IP addresses and networks, from a comma-separated setting."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str, *, networks_only: bool = False) -> HostRules:
        """The rules of TEXT; ValueError naming the first entry that is none of those."""
        names, suffixes, networks = set(), [], []
        for entry in (e.strip().lower() for e in text.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                if networks_only:
                    raise ValueError(f"{entry!r} is not an IP address or network (like 10.0.0.0/8)") from None
            host = entry[2:] if entry.startswith("*.") else entry
            if not host or any(c in host for c in "/:@ []") or host.startswith("."):
                raise ValueError(f"{entry!r} is not a host name, *.suffix, IP address or network")
            if entry.startswith("*."):
                suffixes.append("." + host)
            else:
                names.add(host)
        return cls(frozenset(names), tuple(suffixes), tuple(networks))

    def allows_host(self, host: str) -> bool:
        """Whether HOST (a name or an IP literal) is listed."""
        host = host.lower().rstrip(".")
        address = _address(host)
        if address is not None:
            return self.allows_address(address) or host in self.names
        return host in self.names or any(host.endswith(suffix) for suffix in self.suffixes)

    def allows_address(self, address: IPAddress) -> bool:
        """Whether an allowed network holds ADDRESS (a metadata address only when a network names it alone)."""
        if address in METADATA:
            return any(net.num_addresses == 1 and address in net for net in self.networks)
        return any(address in net for net in self.networks)


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


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
