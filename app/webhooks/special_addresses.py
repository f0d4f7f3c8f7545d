"""The addresses a webhook never goes to, from IANA's special-purpose registries (IPv4 and IPv6, as of 2025), the
deprecated tunnels and the multicast blocks: written out here rather than read from Python's `ipaddress`, whose
`is_global` has changed between patch releases (3.11.7 takes 6to4, site-local, 3fff::/20 and NAT64's embedded
private addresses for public ones)."""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
LOOPBACK, PRIVATE, LINK_LOCAL = "a loopback address", "a private address", "a link-local address"
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix: the last 32 bits are the IPv4 address reached
GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")  # the only IPv6 block IANA allocates for global unicast

# (network, why it is refused); the first that holds an address names it, so narrower blocks come first.
_SPECIAL: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "'this network'"),
    ("10.0.0.0/8", PRIVATE),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
    ("127.0.0.0/8", LOOPBACK),
    ("169.254.0.0/16", LINK_LOCAL),
    ("172.16.0.0/12", PRIVATE),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
    ("192.168.0.0/16", PRIVATE),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved, and the limited broadcast address"),
    ("::1/128", LOOPBACK),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("::/8", "reserved by the IETF (unspecified, IPv4-compatible, IPv4-translated)"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "the dummy IPv6 prefix"),
    ("2001::/23", "IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4 (deprecated: it tunnels to the IPv4 address inside it)"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6) SIDs"),
    ("fc00::/7", PRIVATE),
    ("fe80::/10", LINK_LOCAL),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)
SPECIAL = tuple((ipaddress.ip_network(net), why) for net, why in _SPECIAL)


def reached(address: IPAddress) -> IPAddress:
    """The address a connection to ADDRESS reaches: the IPv4 address inside an IPv4-mapped one (::ffff:a.b.c.d)
    or a NAT64 one (64:ff9b::a.b.c.d, which a gateway translates), else ADDRESS."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def special_purpose(address: IPAddress) -> str | None:
    """Why ADDRESS (as `reached` gives it) is not a public destination, by the registries; None when it is one.
    Any IPv6 address outside 2000::/3 is not public either."""
    for network, why in SPECIAL:
        if address in network:
            return why if why in (LOOPBACK, PRIVATE, LINK_LOCAL) else f"not a public address: {why}, {network}"
    if isinstance(address, ipaddress.IPv6Address) and address not in GLOBAL_UNICAST:
        return f"not a public address: outside {GLOBAL_UNICAST}, the only global unicast block"
    return None
