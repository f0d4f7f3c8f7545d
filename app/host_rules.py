"""Allowed hosts and networks, from a comma-separated setting (RELAY_WEBHOOK_ALLOWED_HOSTS, RELAY_WEBHOOK_ALLOWED_
NETWORKS): parsed by the settings at start and by the webhooks' checks (`app/webhooks/destinations.py`)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Instance metadata services (AWS, ECS, GCP and Azure on 169.254.169.254; AWS IPv6; Alibaba; Oracle's DNS): refused
# unless an allowed network names the address itself.
METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.169.253", "fd00:ec2::254", "100.100.100.200"))


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


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
