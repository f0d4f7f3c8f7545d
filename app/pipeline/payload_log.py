"""Payload logging: live request and response bodies, size-capped, linked to the usage event by request id."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import Connection


@dataclass(frozen=True)
class PayloadLog:
    request_id: str
    request_body: str
    request_truncated: bool
    response_body: str
    response_truncated: bool

    @classmethod
    def capped(cls, request_id: str, request: bytes, response: bytes, limit: int) -> PayloadLog:
        """Keep at most LIMIT bytes of each body, flagging what was cut."""
        return cls(request_id, _text(request[:limit]), len(request) > limit,
                   _text(response[:limit]), len(response) > limit)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def write_payload_log(conn: Connection, entry: PayloadLog) -> None:
    conn.execute(*payload_log_statement(entry))


def payload_log_statement(entry: PayloadLog) -> tuple[str, list[object]]:
    """The insert write_payload_log makes."""
    return ("INSERT INTO payload_logs (request_id, request_body, request_truncated, response_body, response_truncated)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (request_id) DO NOTHING",
            [entry.request_id, entry.request_body, entry.request_truncated, entry.response_body,
             entry.response_truncated])


def read_payload_log(conn: Connection, request_id: str) -> dict[str, object] | None:
    row = conn.execute("SELECT * FROM payload_logs WHERE request_id = %s", (request_id,)).fetchone()
    return dict(row) if row else None  # type: ignore[call-overload]
