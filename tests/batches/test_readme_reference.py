"""The local install's page (docs/development.md, linked from the README) lists what a new user of it needs and cannot
guess: every port variable of scripts/dev.sh and scripts/services.sh with its default, and every route of the fake
upstream's control API."""

from __future__ import annotations

import re

from devtools.fake_upstream import control
from devtools.processes import ROOT

PAGE = (ROOT / "docs" / "development.md").read_text()


def test_every_port_variable_of_the_dev_scripts_is_documented_with_its_default() -> None:
    found = {}
    for script in ("scripts/dev.sh", "scripts/services.sh"):
        found.update(re.findall(r"\$\{(RELAY_[A-Z_]*PORT):-(\d+)\}", (ROOT / script).read_text()))
    assert {"RELAY_API_PORT", "RELAY_FAKE_UPSTREAM_PORT", "RELAY_PG_PORT", "RELAY_MQ_PORT"} <= set(found)
    for name, default in found.items():
        assert f"| `{name}` | `{default}` |" in PAGE, name


def test_every_route_of_the_fake_upstreams_control_api_is_documented() -> None:
    routes = re.findall(r"^- `([A-Z|]+)\s+(/_control/[^ `?]*)", control.__doc__ or "", re.MULTILINE)
    assert len(routes) >= 8
    for methods, path in routes:
        assert f"`{methods.replace('|', chr(92) + '|')} {path}" in PAGE, (methods, path)
