"""The pool's reconnection policy rests on two psycopg_pool internals (app.db.RelayPool): an upgrade that renames
them must fail here rather than silently bring back the old backoff; and a multi-host URL is named whole."""

from __future__ import annotations

import inspect

import pytest
from psycopg_pool import ConnectionPool

from app.db import RelayPool, check_database
from app.errors import ServiceUnavailable
from tests.processes import free_port


@pytest.mark.parametrize(("name", "parameters"), [("_getconn_with_check_loop", ["self", "deadline"]),
                                                  ("_add_connection", ["self", "attempt", "growing"])])
def test_the_pool_internals_relay_overrides_still_exist_with_the_same_parameters(
        name: str, parameters: list[str]) -> None:
    assert getattr(RelayPool, name) is not getattr(ConnectionPool, name)
    assert list(inspect.signature(getattr(ConnectionPool, name)).parameters) == parameters


def test_an_unreachable_multi_host_url_names_every_host_and_no_credential() -> None:
    first, second = free_port(), free_port()
    url = f"postgresql://relay:s3cret@127.0.0.1:{first},localhost:{second}/relay?target_session_attrs=read-write"
    with pytest.raises(ServiceUnavailable) as refused:
        check_database(url)
    assert f"127.0.0.1:{first},localhost:{second}/relay" in refused.value.message
    assert "s3cret" not in refused.value.message
