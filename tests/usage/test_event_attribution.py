"""A usage event is attributed through `Caller.attribution()`, the one mapping of the attribution columns: every
column of it lands on the event, and the event's policy is the call's."""

from __future__ import annotations

from uuid import uuid4

from app.auth_model import ATTRIBUTION, Caller
from app.usage.events import UsageEvent


def test_an_event_carries_every_attribution_column_of_its_caller_and_the_calls_policy() -> None:
    caller = Caller(credential_kind="relay_key", credential_id=uuid4(), relay_key_hash=b"\x01" * 32,
                    principal_kind="service_account", principal_id=uuid4(), policy_id=uuid4(), project_id=uuid4(),
                    team_id=uuid4())
    call_policy = uuid4()
    event = UsageEvent.for_caller(caller, request_id="r-1", source="batch", status=200, policy_id=call_policy)
    assert {name: getattr(event, name) for name in ATTRIBUTION} == {**caller.attribution(), "policy_id": call_policy}
