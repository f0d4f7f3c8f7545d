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

_COLUMNS = "f.id, f.purpose, f.kind, f.filename, f.bytes, f.batch_id, f.created_at"
_VISIBLE = (
    "f.owner = %(owner)s AND (f.kind = 'upload' OR (b.finished_at IS NOT NULL AND EXISTS (SELECT 1 FROM batch_items i"
    " WHERE i.batch_id = f.batch_id AND i.state = ANY(CASE f.kind WHEN 'output' THEN ARRAY['completed']"
    " ELSE ARRAY['discarded', 'cancelled'] END))))"
)
_FROM = "FROM files f LEFT JOIN batches b ON b.id = f.batch_id"


def insert_upload(conn: Conn, file_id: UUID, owner: str, filename: str, size: int) -> Row:
    """Record an uploaded batch input file; return it as stored."""
    row = conn.execute(
        "INSERT INTO files AS f (id, owner, purpose, kind, filename, bytes) VALUES (%s, %s, 'batch', 'upload', %s, %s)"
        f" RETURNING {_COLUMNS}", (file_id, owner, filename, size)).fetchone()
    assert row is not None
    return row  # type: ignore[no-any-return]


def insert_batch_files(conn: Conn, owner: str, batch_id: UUID, files: list[tuple[UUID, str, str]]) -> None:
    """Record a batch's output and error files, (id, kind, filename) each; their bytes are measured later."""
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO files (id, owner, purpose, kind, filename, batch_id)"
                        " VALUES (%s, %s, 'batch_output', %s, %s, %s)",
                        [(file_id, owner, kind, name, batch_id) for file_id, kind, name in files])


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
