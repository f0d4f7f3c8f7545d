"""The parallel groups of tests/tiers.py reach pytest-xdist's scheduler: under --dist loadgroup a test's node id ends
with its group, the scope the scheduler sends to one worker."""

from __future__ import annotations

import pytest


def test_under_loadgroup_a_test_is_scheduled_with_the_tests_of_its_file(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not on a pytest-xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@tests/test_tiers.py"), request.node.nodeid
