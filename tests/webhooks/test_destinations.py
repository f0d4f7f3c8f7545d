"""Where webhooks may go, checked before every attempt by the real worker: loopback, private, link-local,
IPv4-mapped and cloud-metadata addresses are refused unless the operator allows their network (metadata only when
named alone), so the receiver behind them never hears a thing; redirects are not followed."""

from __future__ import annotations

import ipaddress
import time
from typing import Any

import pytest

from app.webhooks.destinations import (
    CallbackUrlNotAllowed,
    DestinationRefused,
    HostRules,
    check_callback_url,
    refusal,
    resolve_target,
)
from devtools.stack import Stack
from devtools.webhook_receiver import Receiver
from tests.webhooks.helpers import PROJECT_SECRET, deliveries, for_batch, submit, wait_delivery


@pytest.mark.integration
def test_every_non_public_destination_is_refused_before_any_connection_and_fails_at_once(
        stack: Stack, receiver: Receiver, apply_catalog: Any) -> None:
    port = receiver.port
    urls = {"loopback": f"http://127.0.0.1:{port}/refused/loopback", "name": f"http://localhost:{port}/refused/name",
            "mapped": f"http://[::ffff:127.0.0.1]:{port}/refused/mapped", "private": "http://10.1.2.3:9/refused",
            "link-local": "http://169.254.10.10:9/refused", "metadata": "http://169.254.169.254/latest/meta-data/",
            "shared": "http://100.64.1.1:9/refused", "unspecified": "http://0.0.0.0:9/refused"}
    apply_catalog(project=[{"url": url, "secret": PROJECT_SECRET} for url in urls.values()])
    stack.start_worker(threads=4, webhook_allowed_networks="169.254.0.0/16")  # even so, metadata stays refused
    batch_id = submit(stack, stack.new_key("hooks"), 1)
    deadline = time.monotonic() + 30
    while True:  # every refused one failed at its first attempt; the allowed link-local one tried (and retries)
        found = {d["url"]: d for d in deliveries(stack, batch_id)}
        # the link-local attempt counts from its start: its error is there once it has ended
        if len(found) == len(urls) and sum(d["state"] == "failed" for d in found.values()) == len(urls) - 1 and \
                found[urls["link-local"]]["attempts"] >= 1 and found[urls["link-local"]]["last_error"] is not None:
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    errors = {url: d["last_error"] for url, d in found.items()}
    for url, reason in ((urls["loopback"], "a loopback address"), (urls["name"], "a loopback address"),
                        (urls["mapped"], "a loopback address"), (urls["private"], "a private address"),
                        (urls["metadata"], "a cloud metadata address"), (urls["shared"], "not a public address"),
                        (urls["unspecified"], "'this network'")):
        assert errors[url].startswith("refused: ") and reason in errors[url], (url, errors[url])
    assert found[urls["link-local"]]["state"] == "pending" and not errors[urls["link-local"]].startswith("refused")
    assert all(d["attempts"] == 1 and d["last_status"] is None for url, d in found.items() if url != urls["link-local"])
    assert receiver.received("/refused") == []


@pytest.mark.integration
def test_a_redirect_is_not_followed(stack: Stack, receiver: Receiver) -> None:
    stack.start_worker(threads=4)
    receiver.behave("/project", status=302, location=f"{receiver.url}/elsewhere", times=1)
    batch_id = submit(stack, stack.new_key("hooks"), 1)
    for_batch(receiver, "/project", batch_id, count=2)  # answered 302, then retried (a 3xx is not a 2xx)
    detail = wait_delivery(stack, batch_id, "delivered")
    assert detail["attempt_log"][0]["status"] == 302
    assert "redirects are not followed" in detail["attempt_log"][0]["error"]
    assert receiver.received("/elsewhere") == []


def test_the_allowed_hosts_setting_takes_names_suffixes_addresses_and_networks() -> None:
    rules = HostRules.parse("hooks.example.com, *.internal.example.com,127.0.0.1,10.20.0.0/16,[::1]")
    for host in ("hooks.example.com", "HOOKS.example.com.", "a.internal.example.com", "127.0.0.1", "10.20.3.4", "::1"):
        assert rules.allows_host(host), host
    for host in ("example.com", "internal.example.com", "evil-hooks.example.com", "127.0.0.2", "10.21.0.1", "::2"):
        assert not rules.allows_host(host), host
    for bad in ("http://x", "a b", "*.", "user@host"):
        with pytest.raises(ValueError):
            HostRules.parse(bad)
    with pytest.raises(ValueError):
        HostRules.parse("hooks.example.com", networks_only=True)


def test_a_callback_url_must_name_an_allowed_host_over_http_or_https() -> None:
    rules = HostRules.parse("hooks.example.com,127.0.0.1")
    assert check_callback_url("https://hooks.example.com/a?b=c", rules)
    assert check_callback_url("http://127.0.0.1:8123/x", rules)
    for url in ("https://other.example.com/", "ftp://hooks.example.com/", "https://u:p@hooks.example.com/",
                "https://hooks.example.com:99999/", "https://127.0.0.1.example.org/", "https://hooks.example.com/#f"):
        with pytest.raises(CallbackUrlNotAllowed):
            check_callback_url(url, rules)
    with pytest.raises(CallbackUrlNotAllowed):
        check_callback_url("https://hooks.example.com/", HostRules.parse(""))  # nothing allowed by default


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("10.0.0.1", "private"),
    ("172.16.5.4", "private"), ("192.168.1.1", "private"), ("fd12::1", "private"), ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"), ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"), ("100.64.0.1", "not a public"), ("224.0.0.1", "not a public"),
])
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    found = refusal(ipaddress.ip_address(address), HostRules())
    assert found is not None and reason in found


@pytest.mark.parametrize(("address", "reason"), [
    ("2002:7f00:1::1", "6to4"), ("2002:808:808::1", "6to4"), ("fec0::1", "site-local"),
    ("feff:ffff::1", "site-local"), ("192.88.99.1", "6to4 relay"), ("192.0.0.9", "IETF protocol"),
    ("0.1.2.3", "this network"), ("198.18.0.1", "benchmarking"), ("192.0.2.7", "documentation"),
    ("255.255.255.255", "limited broadcast"), ("2001:db8::1", "documentation"), ("3fff::1", "documentation"),
    ("2001::1", "Teredo"), ("2001:2::1", "benchmarking"), ("64:ff9b:1::1", "local-use"), ("100::1", "discard"),
    ("5f00::1", "SRv6"), ("ff02::1", "multicast"), ("::", "reserved"), ("::127.0.0.1", "reserved"),
    ("4000::1", "outside 2000::/3"), ("64:ff9b::7f00:1", "loopback"), ("64:ff9b::a9fe:a9fe", "metadata"),
    ("64:ff9b::a00:1", "private"),
])
def test_every_special_purpose_block_of_the_iana_registries_is_refused(address: str, reason: str) -> None:
    found = refusal(ipaddress.ip_address(address), HostRules())
    assert found is not None and reason in found, found


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "::ffff:1.1.1.1",
                                     "192.0.1.1", "2620:4f:8000::1"])
def test_public_addresses_pass_including_a_public_one_behind_nat64(address: str) -> None:
    assert refusal(ipaddress.ip_address(address), HostRules()) is None


def test_an_allowed_network_opens_its_addresses_but_metadata_only_when_named_alone() -> None:
    assert refusal(ipaddress.ip_address("8.8.8.8"), HostRules()) is None
    wide = HostRules.parse("10.0.0.0/8,169.254.0.0/16,100.64.0.0/10", networks_only=True)
    assert refusal(ipaddress.ip_address("10.9.9.9"), wide) is None
    assert refusal(ipaddress.ip_address("169.254.169.254"), wide) == "a cloud metadata address"
    assert refusal(ipaddress.ip_address("100.100.100.200"), wide) == "a cloud metadata address"
    assert refusal(ipaddress.ip_address("169.254.169.254"), HostRules.parse("169.254.169.254/32")) is None


def test_a_destination_is_resolved_once_and_every_address_checked() -> None:
    with pytest.raises(DestinationRefused, match="loopback"):
        resolve_target("http://localhost:9/x", HostRules())
    target = resolve_target("http://localhost:9/x?y=1", HostRules.parse("127.0.0.0/8,::1/128", networks_only=True))
    assert (target.host, target.port, target.path) == ("localhost", 9, "/x?y=1")
    assert target.address in ("127.0.0.1", "::1")
    with pytest.raises(DestinationRefused, match="URL"):
        resolve_target("file:///etc/passwd", HostRules())
