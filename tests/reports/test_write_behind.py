"""Report rows go to the stream behind the rendering (``reports.columns.WriteBehind``): in order, whole,
and a stream that fails is never passed over in silence."""

from __future__ import annotations

import io
import threading

import pyarrow as pa
import pytest

from ragspine_pipeline.reports.columns import WriteBehind, write_column


def _columns() -> list[pa.Array]:
    return [pa.array([f"row {i}.{j} ü\n" for j in range(i % 7)], pa.string()) for i in range(40)]


@pytest.mark.parametrize("binary", [True, False], ids=["byte layer", "text only"])
def test_columns_arrive_whole_and_in_order_as_written_one_by_one(binary):
    def stream() -> io.TextIOBase:
        return io.TextIOWrapper(io.BytesIO(), encoding="utf-8") if binary else io.StringIO()

    behind, direct = stream(), stream()
    with WriteBehind(behind) as rows:
        for i, column in enumerate(_columns()):
            rows.write(column.slice(1) if i % 5 == 0 else column, skip=i % 3)
    for i, column in enumerate(_columns()):
        write_column(direct, column.slice(1) if i % 5 == 0 else column, skip=i % 3)
    text = [s.buffer.getvalue().decode() if binary else s.getvalue() for s in (behind, direct)]
    assert text[0] == text[1] and text[0].count("\n") > 100


class _Failing(io.StringIO):
    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.writers = after, set()

    def write(self, text: str) -> int:
        self.writers.add(threading.get_ident())
        if self.after == 0:
            raise BrokenPipeError("the reader left")
        self.after -= 1
        return super().write(text)


@pytest.mark.parametrize("failing", ["first", "fourth", "last"])
def test_a_failed_write_is_raised_to_the_caller(failing):
    written = sum(len(column) > 0 for column in _columns()[1:])  # an empty column writes nothing
    out = _Failing({"first": 0, "fourth": 3, "last": written - 1}[failing])
    with pytest.raises(BrokenPipeError), WriteBehind(out) as rows:
        for column in _columns()[1:]:
            rows.write(column)
    assert threading.get_ident() not in out.writers  # the writing was behind, on its own thread


def test_leaving_waits_for_the_last_column_before_the_caller_writes_again():
    out = io.StringIO()
    with WriteBehind(out) as rows:
        rows.write(pa.array(["a" * 1_000_000]))
    out.write("end")
    assert out.getvalue() == "a" * 1_000_000 + "end"
