"""The C JSON Lines reader reads what it accepts exactly as pyarrow's reader does, and refuses the rest.

The loader's columnar reader used to hand every file to pyarrow's streaming reader with the schema of
the first block, then check the batches (valid UTF-8, finite numbers). The C reader (``_jsonl``,
``contracts.native``) now reads first and must never widen that: whatever it accepts, pyarrow accepts
and reads to the same table; whatever pyarrow refuses, it refuses. Random lines, well-formed and
hostile (wrong types, repeated and unknown keys, broken bytes, lone surrogates, numbers out of range),
are read by both, with buffers small enough that lines straddle blocks.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pj
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragspine_pipeline.contracts import columns, native
from ragspine_pipeline.contracts.canonical import NotSure

SCHEMA = pa.schema(
    [
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("i", pa.int64()),
        ("d", pa.float64()),
        ("n", pa.null()),
        ("l", pa.list_(pa.string())),
        ("ll", pa.list_(pa.list_(pa.int64()))),
        (
            "st",
            pa.struct(
                [("x", pa.string()), ("y", pa.list_(pa.float64())), ("z", pa.struct([("w", pa.bool_())]))]
            ),
        ),
        ("ls", pa.list_(pa.struct([("t", pa.string()), ("k", pa.int64())]))),
    ]
)

TEXT = st.text(max_size=12) | st.sampled_from(
    ["", 'a"b', "back\\slash", "tab\tnew\nline", "数据", "😀", "\x00"]
)
INT = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 2**63 - 1, -(2**63)])
DOUBLE = (
    st.floats(allow_nan=False, allow_infinity=False) | INT.map(int) | st.sampled_from([5e-324, -0.0, 1e308])
)


def maybe(strategy):
    return st.none() | strategy


def value_of(type_: pa.DataType):
    if pa.types.is_null(type_):
        return st.none()
    if pa.types.is_boolean(type_):
        return maybe(st.booleans())
    if pa.types.is_integer(type_):
        return maybe(INT)
    if pa.types.is_floating(type_):
        return maybe(DOUBLE)
    if pa.types.is_string(type_):
        return maybe(TEXT)
    if pa.types.is_list(type_):
        return maybe(st.lists(value_of(type_.value_type), max_size=3))
    return maybe(record_of(list(type_)))


def record_of(fields: list[pa.Field]):
    """Objects with a random subset of the fields, in a random order."""
    return st.lists(st.sampled_from(fields), unique_by=lambda f: f.name, max_size=len(fields)).flatmap(
        lambda chosen: st.fixed_dictionaries({f.name: value_of(f.type) for f in chosen})
    )


HOSTILE = [
    lambda line: line.replace(b'"i": ', b'"i": 1.5, "j": ', 1),  # an unknown key
    lambda line: line.replace(b"{", b'{"s": "x", "s": "y", ', 1) if b'"s"' not in line else line,  # repeated
    lambda line: line.replace(b"{", b'{"b": 1, ', 1) if b'"b"' not in line else line,  # a number for a bool
    lambda line: line.replace(b"{", b'{"i": 2.0, ', 1) if b'"i"' not in line else line,  # a fraction for int
    lambda line: line.replace(b"{", b'{"i": 9223372036854775808, ', 1) if b'"i"' not in line else line,
    lambda line: line.replace(b"{", b'{"i": 1e3, ', 1) if b'"i"' not in line else line,
    lambda line: line.replace(b"{", b'{"d": 1e400, ', 1) if b'"d"' not in line else line,  # overflows
    lambda line: line.replace(b"{", b'{"s": "\\ud800", ', 1) if b'"s"' not in line else line,  # lone high
    lambda line: line.replace(b"{", b'{"s": "\\udc00x", ', 1) if b'"s"' not in line else line,  # lone low
    lambda line: line.replace(b"{", b'{"s": "\\ud83d\\ude00", ', 1) if b'"s"' not in line else line,  # a pair
    lambda line: line.replace(b"{", b'{"s": "\xff", ', 1) if b'"s"' not in line else line,  # not UTF-8
    lambda line: line.replace(b"{", b'{"s": "\xc0\xaf", ', 1) if b'"s"' not in line else line,  # overlong
    lambda line: (
        line.replace(b"{", b'{"s": "\xed\xa0\x80", ', 1) if b'"s"' not in line else line
    ),  # surrogate
    lambda line: line.replace(b"{", b'{"s": "a\x01b", ', 1) if b'"s"' not in line else line,  # raw control
    lambda line: line.replace(b"{", b'{"s": "\\x", ', 1) if b'"s"' not in line else line,  # unknown escape
    lambda line: line.replace(b"{", b'{"n": 0, ', 1) if b'"n"' not in line else line,  # a value for null
    lambda line: line.replace(b"{", b'{"\\u0073": "x", ', 1) if b'"s"' not in line else line,  # escaped key
    lambda line: line.replace(b"{", b'{"s\xeb": 1, ', 1),  # a key that is not UTF-8
    lambda line: line.replace(b"{", b'{"l": "x", ', 1) if b'"l"' not in line else line,  # not a list
    lambda line: line.replace(b"{", b'{"st": {"x": "a", "q": 1}, ', 1) if b'"st"' not in line else line,
    lambda line: line + b" {}",  # two values on a line
    lambda line: line[:-1],  # cut short
    lambda line: b"[" + line + b"]",  # not an object
    lambda line: line.replace(b":", b" :\t", 1),  # JSON whitespace: still fine
    lambda line: line + b"\r",  # a CRLF line: still fine
]


@st.composite
def files(draw) -> tuple[bytes, bool]:
    """The bytes of a JSON Lines file, and whether every line is well-formed for the schema."""
    records = draw(st.lists(record_of(list(SCHEMA)), min_size=1, max_size=8))
    ascii_only = draw(st.booleans())
    lines = [json.dumps(r, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for r in records]
    clean = True
    rnd = random.Random(draw(st.integers(0, 2**32)))
    for k in range(len(lines)):
        if draw(st.integers(0, 5)) == 0:
            mutate = draw(st.sampled_from(HOSTILE))
            lines[k] = mutate(lines[k])
            clean = False
        elif draw(st.integers(0, 20)) == 0:  # a stray byte anywhere
            at = rnd.randrange(len(lines[k]) + 1)
            lines[k] = lines[k][:at] + bytes([rnd.randrange(256)]) + lines[k][at:]
            clean = False
    if draw(st.booleans()):
        lines.insert(rnd.randrange(len(lines) + 1), b"   ")  # a blank line
    data = b"\n".join(lines) + draw(st.sampled_from([b"\n", b"", b"\n\n"]))
    return data, clean


def by_pyarrow(path: Path, schema: pa.Schema) -> pa.Table | None:
    """What the loader's pyarrow path reads against ``schema`` (all it had before the C reader), or None
    where it gives up."""
    try:
        tables = list(columns._arrow_blocks(path, schema, whole_file=False, c_reader=False))
    except (NotSure, columns._FieldAppearsLate):
        return None
    if any(table.schema != schema for table in tables):
        return None  # an unknown field: pyarrow's reader adds it to the block
    return pa.concat_tables(tables) if tables else schema.empty_table()


def by_c_reader(path: Path, schema: pa.Schema, block_bytes: int) -> pa.Table | None:
    try:
        return pa.Table.from_batches(list(native.batches(path, schema, block_bytes)), schema=schema)
    except native.CannotVouch:
        return None


def same(a: pa.Array, b: pa.Array) -> bool:
    """Equal values, and equal children below every struct, where a null parent hides them from equals."""
    if not a.equals(b):
        return False
    if pa.types.is_struct(a.type):
        return all(same(a.field(i), b.field(i)) for i in range(a.type.num_fields))
    if pa.types.is_list(a.type):
        return same(a.flatten(), b.flatten())
    return True


def same_tables(a: pa.Table, b: pa.Table) -> bool:
    a, b = a.combine_chunks(), b.combine_chunks()
    return a.num_rows == b.num_rows and all(
        same(x.combine_chunks(), y.combine_chunks()) for x, y in zip(a.columns, b.columns, strict=True)
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files(), st.sampled_from([1, 7, 64, 4 << 20]))
def test_the_c_reader_never_widens_pyarrow(tmp_path_factory, file, block_bytes):
    data, clean = file
    path = tmp_path_factory.mktemp("native") / "lines.jsonl"
    path.write_bytes(data)
    reference, mine = by_pyarrow(path, SCHEMA), by_c_reader(path, SCHEMA, block_bytes)
    if mine is not None:
        assert reference is not None, "the C reader accepted what pyarrow refuses"
        assert same_tables(mine, reference)
    if clean:
        assert mine is not None, "the C reader refused well-formed lines"


@pytest.mark.parametrize("base", [b'{"i": 7, "l": ["a"]}', b'{"ll": [[1]], "st": {"x": "y"}}'])
@pytest.mark.parametrize("mutate", HOSTILE)
def test_each_hostile_line_on_its_own(tmp_path, base, mutate):
    path = tmp_path / "lines.jsonl"
    path.write_bytes(base + b"\n" + mutate(base) + b"\n")
    reference, mine = by_pyarrow(path, SCHEMA), by_c_reader(path, SCHEMA, 4 << 20)
    assert mine is None or (reference is not None and same_tables(mine, reference))


def test_escapes_numbers_and_blank_lines_read_as_pyarrow_reads_them(tmp_path):
    lines = [
        '{"s": "\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00", '
        '"i": -9223372036854775808, "d": 5e-324}',
        "",
        '  {"i": 9223372036854775807, "d": -0.0, "s": "数据"}  \r',
        '{"d": 12, "l": [], "ll": [[], [1, -0]], "st": {"z": null}, "ls": [{"k": 3}, {"t": "x"}]}',
        '{"st": null, "n": null, "b": false}',
    ]
    path = tmp_path / "lines.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    mine = by_c_reader(path, SCHEMA, 4 << 20)
    assert mine is not None and same_tables(mine, by_pyarrow(path, SCHEMA))
    assert mine.column("s")[0].as_py() == '"\\/\b\f\n\r\té€😀'
    assert mine.column("i").to_pylist() == [-(2**63), 2**63 - 1, None, None]
    assert mine.column("st").combine_chunks().field("x").null_count == 4  # a null struct's children are null


@pytest.mark.parametrize(
    "line",
    [
        '{"s": "\\ud800"}',  # a lone surrogate
        '{"s": "\\udc00"}',
        '{"s": "a\tb"}',  # a raw control character
        '{"i": 9223372036854775808}',  # past int64
        '{"i": -9223372036854775809}',
        '{"d": 1e309}',  # past a double
        '{"s": "x", "s": "y"}',  # given twice
        '{"zz": 1}',  # not in the schema
        '{"s": 1}',  # another type
        '{"s": "x"} {"s": "y"}',  # two objects on a line
        "null",
    ],
)
def test_what_the_c_reader_refuses(tmp_path, line):
    path = tmp_path / "lines.jsonl"
    path.write_text('{"s": "fine"}\n' + line + "\n", encoding="utf-8")
    assert by_c_reader(path, SCHEMA, 4 << 20) is None


def test_a_line_longer_than_the_buffer_grows_it(tmp_path):
    long_text = "x" * 10_000
    path = tmp_path / "lines.jsonl"
    path.write_text(json.dumps({"s": long_text}) + "\n" + json.dumps({"s": "short"}) + "\n", encoding="utf-8")
    mine = by_c_reader(path, SCHEMA, 64)
    assert mine is not None and mine.column("s").to_pylist() == [long_text, "short"]


@pytest.mark.parametrize(
    "schema",
    [
        pa.schema([("t", pa.timestamp("s"))]),
        pa.schema([("m", pa.map_(pa.string(), pa.string()))]),
        pa.schema([("i", pa.int32())]),
        pa.schema([(f"f{i}", pa.string()) for i in range(65)]),
        pa.schema([]),
    ],
)
def test_a_type_it_does_not_build_goes_to_pyarrow(tmp_path, schema):
    path = tmp_path / "lines.jsonl"
    path.write_text("{}\n", encoding="utf-8")
    assert by_c_reader(path, schema, 4 << 20) is None


def test_the_loader_reads_the_bench_dialects_with_the_c_reader(tmp_path, monkeypatch):
    """Guard against a loader that quietly hands every file to pyarrow's reader (same result, slower)."""
    gold = tmp_path / "gold.jsonl"
    case = {
        "qid": "q1",
        "question": "Q?",
        "answerable": True,
        "gold_claim_substr": ["a"],
        "gold_citations": [],
    }
    gold.write_text(json.dumps(case) + "\n", encoding="utf-8")
    traces = tmp_path / "traces.jsonl"
    trace = {"q_id": "q1", "retrieved_ids": ["p1"], "answer_json": {"claim": "a", "citations": ["p1"]}}
    traces.write_text(json.dumps({**trace, "latency_ms": 5}) + "\n", encoding="utf-8")
    read = []
    original = native.batches

    def vouching(path, *args):
        yield from original(path, *args)
        read.append(Path(path).name)  # reached only when the C reader read the whole file

    monkeypatch.setattr(native, "batches", vouching)
    columns.load_gold(gold)
    columns.load_traces(traces)
    assert read == ["gold.jsonl", "traces.jsonl"]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "example", ["wfgy/gold", "wfgy/traces", "layered/gold", "layered/traces", "layered/evidence"]
)
def test_byte_mutations_of_real_lines(tmp_path, example):
    """Every dialect's lines, broken byte by byte (inserted, deleted, repeated stretches, JSON
    fragments): the C reader either refuses the file or reads what pyarrow reads. Seeded; raise
    ``RAGSPINE_FUZZ_EXAMPLES`` for a longer hunt, and build ``_jsonl.c`` with ``-fsanitize=address,undefined``
    (run with ``LD_PRELOAD`` of libasan and libubsan) to hunt memory errors as well."""
    source = EXAMPLES / f"{example}.jsonl"
    lines = [line for line in source.read_bytes().splitlines(keepends=True) if line.strip()]
    schema = columns.as_strings(pj.open_json(source).schema)
    rnd = random.Random(example)
    fragments = [b"\\u", b"\\ud800", b"\\udc00", b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"null"]
    fragments += [b"1e999", b"-", b"\xf0\x9f", b"\xe9", b" \r", b"\n"]
    path = tmp_path / "lines.jsonl"
    for _ in range(int(os.environ.get("RAGSPINE_FUZZ_EXAMPLES", "60"))):
        chosen = [bytearray(line) for line in rnd.sample(lines, min(4, len(lines)))]
        for _ in range(rnd.randint(1, 4)):
            line = rnd.choice(chosen)
            at, op = rnd.randrange(len(line) + 1), rnd.randrange(4)
            if op == 0:
                line[at:at] = bytes([rnd.randrange(256)])
            elif op == 1:
                del line[min(at, len(line) - 1)]
            elif op == 2:
                line[at:at] = rnd.choice(fragments)
            else:
                other = rnd.randrange(len(line) + 1)
                line[at:at] = line[min(at, other) : max(at, other)]
        path.write_bytes(b"".join(chosen))
        reference, mine = by_pyarrow(path, schema), by_c_reader(path, schema, rnd.choice([1, 50, 4 << 20]))
        assert mine is None or (reference is not None and same_tables(mine, reference)), path.read_bytes()
