"""JSON Lines read straight into Arrow record batches, in C, against a schema already known.

The columnar loader lets pyarrow infer a file's schema from its first block, then reads the whole file
with :func:`batches`: one pass over each block of lines in ``_jsonl.Reader`` builds the Arrow buffers
directly, without the generic reader's intermediate values, type checks after parsing, or UTF-8 and
finiteness checks of its own (the reader refuses invalid UTF-8 and numbers a double cannot hold).

The reader takes only what it is sure of: as soon as a block holds something else — a line that is not
one JSON object, a field outside the schema or given twice, a value of another type, an escape in a
key — :func:`batches` raises :class:`CannotVouch`, and the loader reads the file with pyarrow's reader
instead, which accepts it, or sends it on to the record reader that names the line. What the C reader
accepts it reads as pyarrow's reader does with the same schema (``tests/contracts/test_native.py``
holds the two to the same tables).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ragspine_pipeline import _jsonl, inputs

__all__ = ["CannotVouch", "batches"]

BLOCK_BYTES = 4 << 20
"""Bytes read and parsed at a time: a batch each. The buffer is reused, so no block touches new memory."""

_NULL, _BOOL, _INT64, _DOUBLE, _STRING, _LIST, _STRUCT = range(7)
_EMPTY = pa.py_buffer(b"")
_MOST_BYTES = 2**31 - 1  # Arrow's string and list offsets are int32: no block holds more bytes


class CannotVouch(Exception):
    """The C reader met something it does not read: the file is for pyarrow's reader."""


def _code(type_: pa.DataType) -> tuple[int, tuple] | None:
    """``(type code, children)`` of the reader's schema spec, or None for a type it does not build."""
    if pa.types.is_null(type_):
        return _NULL, ()
    if pa.types.is_boolean(type_):
        return _BOOL, ()
    if type_ == pa.int64():
        return _INT64, ()
    if type_ == pa.float64():
        return _DOUBLE, ()
    if type_ == pa.string():
        return _STRING, ()
    if pa.types.is_list(type_):
        item = _code(type_.value_type)
        return None if item is None else (_LIST, (("item", *item),))
    if pa.types.is_struct(type_):
        fields = _fields(list(type_))
        return None if fields is None else (_STRUCT, fields)
    return None


def _fields(fields: list[pa.Field]) -> tuple | None:
    if not fields or len(fields) > 64 or len({f.name for f in fields}) != len(fields):
        return None
    coded = [_code(f.type) for f in fields]
    if any(c is None for c in coded):
        return None
    return tuple((f.name, *c) for f, c in zip(fields, coded, strict=True))


def batches(path: str | Path, schema: pa.Schema, block_bytes: int = BLOCK_BYTES) -> Iterator[pa.RecordBatch]:
    """The lines of ``path`` as record batches of ``schema``, about ``block_bytes`` of lines at a time.

    Raises CannotVouch for a schema with a type the C reader does not build (anything but null, bool,
    int64, double, string, lists and structs of these, at most 64 fields a struct), and as soon as a
    block holds anything it does not read (the caller drops what it got and reads the file another
    way); the caller has checked that no line is longer than
    :data:`inputs.MAX_LINE_BYTES`, but a longer one only costs a larger buffer.
    """
    fields = _fields(list(schema))
    if fields is None:
        raise CannotVouch
    reader = _jsonl.Reader((_STRUCT, fields))
    buffer = bytearray(block_bytes)
    held = 0  # bytes of an unfinished line carried to the start of the buffer
    with inputs.open_regular(path) as fh:
        while True:
            if held == len(buffer):  # one line fills the buffer: make room for the rest of it
                buffer.extend(bytes(len(buffer)))
            read = fh.readinto(memoryview(buffer)[held:])
            size = held + read
            at_end = read == 0
            if size == 0:
                return
            end = size if at_end else buffer.rfind(b"\n", 0, size) + 1
            if end == 0:
                held = size
                continue
            if end > _MOST_BYTES:  # a block past int32 offsets (only with a raised line cap)
                raise CannotVouch
            out = reader.read(buffer, 0, end)
            if out is None:
                raise CannotVouch
            if out[0]:
                yield _batch(schema, out)
            if at_end:
                return
            buffer[: size - end] = buffer[end:size]
            held = size - end


def _batch(schema: pa.Schema, out: tuple) -> pa.RecordBatch:
    arrays = [_array(field.type, child) for field, child in zip(schema, out[5], strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _array(type_: pa.DataType, out: tuple) -> pa.Array:
    length, null_count, validity, values, data, children = out
    if pa.types.is_null(type_):
        return pa.nulls(length)
    buffers = [None if validity is None else pa.py_buffer(validity)]
    kids = None
    if pa.types.is_struct(type_):
        kids = [_array(field.type, child) for field, child in zip(type_, children, strict=True)]
    else:
        buffers.append(_EMPTY if values is None else pa.py_buffer(values))
        if pa.types.is_string(type_):
            buffers.append(_EMPTY if data is None else pa.py_buffer(data))
        elif pa.types.is_list(type_):
            kids = [_array(type_.value_type, children[0])]
    return pa.Array.from_buffers(type_, length, buffers, null_count=null_count, children=kids)
