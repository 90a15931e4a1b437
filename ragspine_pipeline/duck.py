"""DuckDB, the one library the project uses for columnar work Arrow has no compute function for.

Arrow (pyarrow.compute) answers whole-column questions; what it cannot say row by row — is this row's
needle in this row's string, is this id among this row's list, which rows share a key — is one SQL
expression here, run by DuckDB over the same Arrow columns (read in place, not copied into Python).

One in-memory database per process; every :func:`query` runs on a cursor of its own, so threads may
query at once.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

# Where DuckDB spills what does not fit in memory (a day of spans grouped by trace, say): the system's
# temporary folder, never the working directory (DuckDB's default, ``.tmp`` wherever a command runs).
_SPILL = Path(tempfile.gettempdir()) / f"ragspine-duckdb-{getattr(os, 'getuid', lambda: 0)()}"
_DATABASE = duckdb.connect(":memory:", config={"temp_directory": str(_SPILL)})


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


def batches(sql: str, rows: int, **tables: pa.Table) -> Iterator[pa.RecordBatch]:
    """The result of ``sql`` as record batches of about ``rows`` rows each, as DuckDB produces them
    (the whole result is never held at once). An error DuckDB meets on the way (it refuses an input)
    is :class:`StreamRefused`: through Arrow's stream it would come as a bare OSError."""
    cursor = _DATABASE.cursor()
    try:
        for name, table in tables.items():
            cursor.register(name, table)
        reader = cursor.sql(sql).to_arrow_reader(rows)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except OSError as exc:
                raise StreamRefused(str(exc)) from None
            yield batch
    finally:
        cursor.close()


class StreamRefused(Exception):
    """DuckDB refused an input while streaming a result (:func:`batches`)."""


REFUSED = (StreamRefused, duckdb.Error, UnicodeDecodeError)
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
