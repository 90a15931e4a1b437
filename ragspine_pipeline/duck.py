"""DuckDB, the one library the project uses for columnar work Arrow has no compute function for.

Arrow (pyarrow.compute) answers whole-column questions; what it cannot say row by row — is this row's
needle in this row's string, is this id among this row's list, which rows share a key — is one SQL
expression here, run by DuckDB over the same Arrow columns (read in place, not copied into Python).

One in-memory database per process; every :func:`query` runs on a cursor of its own, so threads may
query at once.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

_DATABASE = duckdb.connect(":memory:")


def query(sql: str, **tables: pa.Table) -> pa.Table:
    """The result of ``sql`` as an Arrow table, with each keyword argument readable as a table of its
    name. Rows come in the order of the tables they are read from unless ``sql`` orders them."""
    cursor = _DATABASE.cursor()
    try:
        for name, table in tables.items():
            cursor.register(name, table)
        return cursor.sql(sql).to_arrow_table()
    finally:
        cursor.close()


REFUSED = (duckdb.Error, UnicodeDecodeError)
"""What DuckDB raises when it refuses an input. Its message quotes the input, cut at a byte limit: when
the cut falls inside a character, building the Python exception raises UnicodeDecodeError instead."""


def column(sql: str, **tables: pa.Table) -> pa.ChunkedArray:
    """The only column of :func:`query`'s result."""
    result = query(sql, **tables)
    if result.num_columns != 1:
        raise ValueError(f"expected one column, got {result.column_names}")
    return result.column(0)


def literal(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"
