"""Files SQL. Every function takes a connection; the caller owns the transaction.

A batch's output and error files are visible (read, listed, downloaded, deleted) once the batch has finished and
holds at least one item of that kind: completed items for `output`, discarded or cancelled ones for `error`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import Connection

Row = dict[str, Any]
Conn = Connection[Any]

# When the file expires (NULL: never): EXPIRES_AFTER_S after an upload's creation, or after its batch ended.
_EXPIRES_AT = ("(CASE f.kind WHEN 'upload' THEN f.created_at ELSE b.finished_at END"
               " + make_interval(secs => f.expires_after_s))")
_COLUMNS = f"f.id, f.purpose, f.kind, f.filename, f.bytes, f.batch_id, f.created_at, {_EXPIRES_AT} AS expires_at"
_VISIBLE = (
    "f.owner = %(owner)s AND (f.kind = 'upload' OR (b.finished_at IS NOT NULL AND EXISTS (SELECT 1 FROM batch_items i"
    " WHERE i.batch_id = f.batch_id AND i.state = ANY(CASE f.kind WHEN 'output' THEN ARRAY['completed']"
    f" ELSE ARRAY['discarded', 'cancelled'] END)))) AND (f.expires_after_s IS NULL OR {_EXPIRES_AT} > now())"
)
_FROM = "FROM files f LEFT JOIN batches b ON b.id = f.batch_id"


def insert_upload(conn: Conn, file_id: UUID, owner: str, filename: str, size: int,
                  expires_after_s: int | None = None) -> Row:
    """Record an uploaded batch input file (expiring EXPIRES_AFTER_S after now, if given); return it as stored."""
    row = conn.execute(
        "WITH f AS (INSERT INTO files (id, owner, purpose, kind, filename, bytes, expires_after_s)"
        " VALUES (%s, %s, 'batch', 'upload', %s, %s, %s) RETURNING *)"
        f" SELECT {_COLUMNS} FROM f LEFT JOIN batches b ON false",
        (file_id, owner, filename, size, expires_after_s)).fetchone()
    assert row is not None
    return row  # type: ignore[no-any-return]


def insert_batch_files(conn: Conn, owner: str, batch_id: UUID, files: list[tuple[UUID, str, str]],
                       expires_after_s: int | None = None) -> None:
    """Record a batch's output and error files, (id, kind, filename) each, expiring EXPIRES_AFTER_S after the
    batch ends if given; their bytes are measured later."""
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO files (id, owner, purpose, kind, filename, batch_id, expires_after_s)"
                        " VALUES (%s, %s, 'batch_output', %s, %s, %s, %s)",
                        [(file_id, owner, kind, name, batch_id, expires_after_s) for file_id, kind, name in files])


def take_expired_uploads(conn: Conn, owner: str) -> list[UUID]:
    """Delete OWNER's uploads past their expiry; their ids (their bytes are the caller's to remove)."""
    rows = conn.execute("DELETE FROM files f WHERE f.owner = %s AND f.kind = 'upload' AND f.expires_after_s IS NOT"
                        " NULL AND f.created_at + make_interval(secs => f.expires_after_s) <= now() RETURNING f.id",
                        (owner,)).fetchall()
    return [row["id"] for row in rows]


def get_file(conn: Conn, file_id: UUID, owner: str) -> Row | None:
    """The file if OWNER may see it now."""
    return conn.execute(  # type: ignore[no-any-return]
        f"SELECT {_COLUMNS} {_FROM} WHERE f.id = %(id)s AND {_VISIBLE}", {"id": file_id, "owner": owner}).fetchone()


def list_files(conn: Conn, owner: str, *, purpose: str | None, after: UUID | None, limit: int,
               newest_first: bool) -> list[Row]:
    """A page of OWNER's visible files ordered by (created_at, id), strictly past the file AFTER."""
    params: dict[str, Any] = {"owner": owner, "purpose": purpose, "after": after, "limit": limit}
    past = "<" if newest_first else ">"
    order = "DESC" if newest_first else "ASC"
    sql = f"SELECT {_COLUMNS} {_FROM} WHERE {_VISIBLE} AND (%(purpose)s::text IS NULL OR f.purpose = %(purpose)s)"
    if after is not None:
        sql += (f" AND (f.created_at, f.id) {past} (SELECT created_at, id FROM files"
                " WHERE id = %(after)s AND owner = %(owner)s)")
    sql += f" ORDER BY f.created_at {order}, f.id {order} LIMIT %(limit)s"
    return conn.execute(sql, params).fetchall()


def delete_file(conn: Conn, file_id: UUID, owner: str) -> Row | None:
    """Delete the file if OWNER may see it; the deleted row or None."""
    return conn.execute(  # type: ignore[no-any-return]
        f"DELETE FROM files d USING (SELECT f.id {_FROM} WHERE f.id = %(id)s AND {_VISIBLE}) v WHERE d.id = v.id"
        " RETURNING d.id, d.kind", {"id": file_id, "owner": owner}).fetchone()


def set_bytes(conn: Conn, file_id: UUID, size: int) -> None:
    """Remember the measured size of a generated file."""
    conn.execute("UPDATE files SET bytes = %s WHERE id = %s", (size, file_id))


def batch_files(conn: Conn, batch_ids: list[UUID]) -> dict[tuple[UUID, str], UUID]:
    """(batch id, kind) → file id of the output and error files of BATCH_IDS that still exist."""
    rows = conn.execute("SELECT batch_id, kind, id FROM files WHERE batch_id = ANY(%s)", (batch_ids,)).fetchall()
    return {(r["batch_id"], r["kind"]): r["id"] for r in rows}
