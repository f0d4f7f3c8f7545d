import pytest

pytestmark = pytest.mark.integration


def test_healthz_answers_while_the_process_is_up(client) -> None:
    assert client.get("/healthz").json == {"status": "ok"}


def test_readyz_reports_both_services_ok(client) -> None:
    res = client.get("/readyz")
    assert res.status_code == 200
    assert res.json["checks"] == {"postgres": "ok", "rabbitmq": "ok"}


def test_every_response_carries_a_request_id(client) -> None:
    assert len(client.get("/healthz").headers["x-request-id"]) >= 8


def test_unknown_routes_get_a_json_404(client) -> None:
    res = client.get("/nope")
    assert res.status_code == 404
    assert res.json["error"]["code"] == "not_found"


def test_migrations_are_idempotent(settings) -> None:
    from app.migrate import apply_migrations

    assert apply_migrations(settings.database_url) == []


def test_the_write_check_reports_a_server_that_takes_no_writes(settings) -> None:
    import psycopg
    from psycopg.rows import dict_row

    from app.observability.health import check_writes

    with psycopg.connect(settings.database_url, autocommit=True, row_factory=dict_row) as conn:
        assert check_writes(conn) == "ok"
        conn.execute("SET default_transaction_read_only = on")  # what a standby answers, on the primary
        assert check_writes(conn).startswith("read-only:")
