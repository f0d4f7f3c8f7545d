"""Postgres's bytes on disk, split per table into its heap, its indexes and its TOAST (table and index), and the
WAL position: what the soak reports per retained item, and what `python -m bench.pgsize DSN` prints for a database."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import psycopg

_SIZES = """
SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid),
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname = 'public'
"""
PARTS = ("table", "indexes", "toast")


@dataclass(frozen=True)
class TableSize:
    """One table's bytes: its heap (main fork), its indexes and its TOAST table with the TOAST index."""

    table: int
    indexes: int
    toast: int

    @property
    def total(self) -> int:
        return self.table + self.indexes + self.toast

    def minus(self, other: TableSize | None) -> TableSize:
        if other is None:
            return self
        return TableSize(self.table - other.table, self.indexes - other.indexes, self.toast - other.toast)


def table_sizes(conn: psycopg.Connection[Any]) -> dict[str, TableSize]:
    """Every table of the public schema → its size now."""
    return {str(r[0]): TableSize(int(r[1]), int(r[2]), int(r[3])) for r in conn.execute(_SIZES).fetchall()}


def growth(after: dict[str, TableSize], before: dict[str, TableSize]) -> dict[str, TableSize]:
    """What each table grew by between two samples (tables that did not change left out)."""
    grown = {name: size.minus(before.get(name)) for name, size in after.items()}
    return {name: size for name, size in grown.items() if size.total}


def index_sizes(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    """TABLE's indexes → bytes each."""
    rows = conn.execute("SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index"
                        " WHERE indrelid = %s::regclass", (table,)).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def wal_lsn(conn: psycopg.Connection[Any]) -> str:
    """The cluster's current WAL insert position (every database of the cluster writes there)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return str(row[0]) if row else "0/0"


def wal_bytes(conn: psycopg.Connection[Any], since: str) -> int:
    """WAL bytes written in the whole cluster since the position SINCE."""
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", (since,)).fetchone()
    return int(row[0]) if row else 0


def report(sizes: dict[str, TableSize], items: int) -> str:
    """A Markdown table of SIZES (largest first) in bytes per item, over ITEMS items, with indexes one by one."""
    lines = ["| table | table B/item | indexes B/item | TOAST B/item | total B/item |", "|---|---|---|---|---|"]
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1].total):
        lines.append(f"| {name} | {size.table / items:.0f} | {size.indexes / items:.0f} | {size.toast / items:.0f} "
                     f"| {size.total / items:.0f} |")
    total = sum(s.total for s in sizes.values())
    lines.append(f"| **all** | | | | **{total / items:.0f}** |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`python -m bench.pgsize DSN [ITEMS]`: every table's size (per item when ITEMS is given) and its indexes."""
    with psycopg.connect(argv[0], autocommit=True) as conn:
        items = int(argv[1]) if len(argv) > 1 else 1
        sizes = table_sizes(conn)
        print(report({n: s for n, s in sizes.items() if s.total > 8192 * 4}, items))
        for name in ("batch_items", "usage_events"):
            for index, size in index_sizes(conn, name).items():
                print(f"{index}: {size / items:.1f} B/item")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
