"""Benchmark: DuckDB and polars side by side, for the one columnar library the project reads with.

    python bench/bench_readers.py [--n 1000000] [--traces 4000000] [--repeat 3]

polars is not a dependency of the project: give ``--polars-python`` an interpreter that has polars,
duckdb, pyarrow and numpy (e.g. a scratch venv: ``uv venv /tmp/polars && uv pip install --python
/tmp/polars polars duckdb pyarrow numpy``); without it only DuckDB's figures are printed. Each
measurement runs in a fresh process (its own import cost, cold caches of the library, peak RSS from
``ru_maxrss``):

* ``read``: the 1M-case production export of ``bench_score.py`` (gold + shuffled traces) read into Arrow
  against explicit column types (DuckDB ``read_json(columns=…)``; polars ``read_ndjson(schema=…)``);
* ``read + flags``: the same, then the trace joined to its case and, per case, refusal, every citation
  among the retrieved ids and a ≥5-character gold substring in the claim, in each library's own
  expressions;
* ``project reader``: what ``ragspine-eval score`` does before scoring: DuckDB against the structure the
  contract models derive, every value tested (``contracts.columns.load_gold`` / ``load_traces``);
* ``sampling day``: every line of the gzipped 4M-trace day of ``bench_sampling.py`` parsed from memory,
  a decompressed file at a time (DuckDB ``from_json`` over the lines; polars ``read_ndjson`` of the bytes).

Then the fidelity of each reader on lines the contract must not misread (a number where text is declared,
a repeated key, a lone surrogate, NaN), which decided the choice as much as the times did.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

GOLD_TYPES = {
    "qid": "VARCHAR",
    "question": "VARCHAR",
    "answerable": "BOOLEAN",
    "gold_claim_substr": "VARCHAR[]",
    "gold_citations": "VARCHAR[]",
    "gold_claim": "VARCHAR",
}
TRACE_TYPES = {
    "qid": "VARCHAR",
    "q_id": "VARCHAR",
    "q": "VARCHAR",
    "retrieved_ids": "VARCHAR[]",
    "answer_json": "STRUCT(claim VARCHAR, citations VARCHAR[])",
    "latency_ms": "DOUBLE",
}

DUCK_READ = """
import sys, duckdb
gold, traces, gold_types, trace_types = sys.argv[1:5]
con = duckdb.connect()
g = con.sql(f"SELECT * FROM read_json('{gold}', format='newline_delimited', columns={gold_types})")
t = con.sql(f"SELECT * FROM read_json('{traces}', format='newline_delimited', columns={trace_types})")
g, t = g.to_arrow_table(), t.to_arrow_table()
print(g.num_rows, t.num_rows)
"""

DUCK_FLAGS = (
    DUCK_READ
    + """
con.register("g", g)
con.register("t", t)
flags = con.sql('''
    WITH last AS (
        SELECT coalesce(qid, q_id) AS key,
               arg_max(answer_json, rowid) AS answer, arg_max(retrieved_ids, rowid) AS retrieved
        FROM (SELECT *, row_number() OVER () AS rowid FROM t) GROUP BY key
    )
    SELECT
        g.qid,
        trim(lower(coalesce(answer.claim, ''))) = 'not in context' AS refused,
        coalesce(list_bool_and([list_contains(retrieved, c) FOR c IN answer.citations]), true)
            AS cited_retrieved,
        coalesce(list_bool_or([contains(lower(answer.claim), lower(s)) FOR s IN g.gold_claim_substr
                               IF length(s) >= 5]), false) AS contained
    FROM g LEFT JOIN last ON last.key = g.qid
''').to_arrow_table()
print(flags.num_rows)
"""
)

POLARS_READ = """
import sys, polars as pl
gold, traces = sys.argv[1:3]
S = pl.String
gold_schema = {"qid": S, "question": S, "answerable": pl.Boolean, "gold_claim_substr": pl.List(S),
               "gold_citations": pl.List(S), "gold_claim": S}
trace_schema = {"qid": S, "q_id": S, "q": S, "retrieved_ids": pl.List(S),
                "answer_json": pl.Struct({"claim": S, "citations": pl.List(S)}), "latency_ms": pl.Float64}
g = pl.read_ndjson(gold, schema=gold_schema)
t = pl.read_ndjson(traces, schema=trace_schema)
print(g.height, t.height)
g.to_arrow(); t.to_arrow()
"""

POLARS_FLAGS = (
    POLARS_READ
    + """
t = t.with_columns(key=pl.coalesce("qid", "q_id")).with_row_index("row")
last = t.group_by("key").agg(pl.all().sort_by("row").last())
joined = g.join(last, left_on="qid", right_on="key", how="left").with_columns(
    claim=pl.col("answer_json").struct.field("claim").fill_null("").str.to_lowercase(),
    citations=pl.col("answer_json").struct.field("citations"),
)
pairs = joined.select("qid", "claim", "gold_claim_substr").explode("gold_claim_substr").filter(
    pl.col("gold_claim_substr").str.len_chars() >= 5
)
contained = pairs.group_by("qid").agg(
    contained=pl.col("claim").str.contains(pl.col("gold_claim_substr").str.to_lowercase(), literal=True).any()
)
flags = joined.select(
    "qid",
    refused=pl.col("claim").str.strip_chars() == "not in context",
    cited_retrieved=pl.col("citations").list.set_difference(pl.col("retrieved_ids")).list.len() == 0,
).join(contained, on="qid", how="left")
print(flags.height)
"""
)

PROJECT_READ = """
import sys
from ragspine_pipeline.contracts.columns import load_gold, load_traces
g, t = load_gold(sys.argv[1]), load_traces(sys.argv[2])
print(g.reader, t.reader, g.table.num_rows, t.table.num_rows)
"""

DUCK_DAY = """
import gzip, sys, duckdb, numpy as np, pyarrow as pa
from pathlib import Path
con = duckdb.connect()
n = 0
for path in sorted(Path(sys.argv[1]).rglob("*.jsonl.gz")):
    data = gzip.decompress(path.read_bytes())
    buf = np.frombuffer(data, np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(buf == 10) + 1))
    lines = pa.BinaryArray.from_buffers(pa.binary(), len(starts) - 1,
                                        [None, pa.py_buffer(starts.astype(np.int32)), pa.py_buffer(data)])
    con.register("lines", pa.table({"line": lines}))
    structure = '{"request_id": "VARCHAR", "tags": "JSON", "answer": "JSON", "latency_ms": "DOUBLE"}'
    n += con.sql(f'''SELECT count(*) FROM (SELECT try(from_json(decode(line), '{structure}')) AS t FROM lines)
        WHERE t IS NOT NULL''').fetchall()[0][0]
print(n)
"""

POLARS_DAY = """
import gzip, io, sys, polars as pl
from pathlib import Path
n = 0
for path in sorted(Path(sys.argv[1]).rglob("*.jsonl.gz")):
    data = gzip.decompress(path.read_bytes())
    # ignore_errors covers values of another type, not a malformed line: such a file stops the read.
    frame = pl.read_ndjson(io.BytesIO(data), schema={"request_id": pl.String, "latency_ms": pl.Float64},
                           ignore_errors=True)
    n += frame.height
print(n)
"""


def run(script: str, *args: str, python: str = sys.executable) -> tuple[float, float] | None:
    """(wall, peak RSS) of the script in a fresh process; None when it fails (its error is printed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", script, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        print(f"  (failed: {proc.stderr.read().decode().strip().splitlines()[-1][:100]})", file=sys.stderr)
        return None
    return wall, usage.ru_maxrss / 1024


def has_polars(python: str) -> bool:
    return subprocess.run([python, "-c", "import polars"], capture_output=True).returncode == 0


FIDELITY = {
    "a number where text is declared": ('{"q": 5}', "refuse or report the type"),
    "a repeated key": ('{"q": "a", "q": "b"}', "refuse, or read the last value (JSON's rule)"),
    "a lone surrogate escape": ('{"q": "\\ud800"}', "refuse (it is not text)"),
    "NaN": ('{"x": NaN}', "refuse, or keep visible"),
}


def fidelity(python: str) -> list[tuple[str, str, str, str]]:
    """How each reader treats lines the contract must not misread, read against ``{"q": text}``."""
    rows = []
    for what, (line, wanted) in FIDELITY.items():
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
            fh.write(line + "\n")
        outcomes = {}
        for library, script in (
            (
                "duckdb",
                "import duckdb,sys; print(duckdb.sql(f\"SELECT * FROM read_json('{sys.argv[1]}', "
                "format='newline_delimited', columns={{'q': 'VARCHAR'}})\").fetchall())",
            ),
            (
                "polars",
                "import polars as pl,sys; print(pl.read_ndjson(sys.argv[1], "
                "schema={'q': pl.String}).to_dicts())",
            ),
        ):
            done = subprocess.run([python, "-c", script, fh.name], capture_output=True, text=True)
            outcomes[library] = done.stdout.strip() or ("error: " + done.stderr.strip().splitlines()[-1][:70])
        os.unlink(fh.name)
        rows.append((what, wanted, outcomes["duckdb"], outcomes["polars"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--traces", type=int, default=4_000_000)
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--polars-python", default=sys.executable, help="an interpreter with polars installed"
    )
    args = parser.parse_args()

    import bench_sampling
    import bench_score

    gold, traces = bench_score.generate(args.n, 7, True)
    day = bench_sampling.generate(
        ROOT / "bench" / "data" / f"sampling-{args.traces}", args.traces, args.files
    )
    polars = has_polars(args.polars_python)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"polars {'installed' if polars else 'not installed: DuckDB only'}")  # fmt: skip
    g_types, t_types = json.dumps(GOLD_TYPES).replace('"', "'"), json.dumps(TRACE_TYPES).replace('"', "'")
    n = f"{args.n // 1000:,}k" if args.n < 1_000_000 else f"{args.n // 1_000_000}M"
    cases = [
        (f"read ({n} gold + traces)", "duckdb", DUCK_READ, (str(gold), str(traces), g_types, t_types)),
        ("read + flags", "duckdb", DUCK_FLAGS, (str(gold), str(traces), g_types, t_types)),
        ("project reader (every value tested)", "duckdb", PROJECT_READ, (str(gold), str(traces))),
        (f"sampling day ({args.traces:,} traces)", "duckdb", DUCK_DAY, (str(day),)),
    ]
    if polars:
        cases[1:1] = [(f"read ({n} gold + traces)", "polars", POLARS_READ, (str(gold), str(traces)))]
        cases[3:3] = [("read + flags", "polars", POLARS_FLAGS, (str(gold), str(traces)))]
        cases.append((f"sampling day ({args.traces:,} traces)", "polars", POLARS_DAY, (str(day),)))
    print(f"\n| what | library | wall (median of {args.repeat}) | wall (min–max) | peak RSS |")
    print("|---|---|---|---|---|")
    for what, library, script, script_args in cases:
        python = args.polars_python if library == "polars" else sys.executable
        runs = [run(script, *script_args, python=python) for _ in range(args.repeat)]
        if None in runs:
            print(f"| {what} | {library} | fails | | |")
            continue
        walls = sorted(wall for wall, _ in runs)
        print(f"| {what} | {library} | {statistics.median(walls):.2f} s | {walls[0]:.2f}–{walls[-1]:.2f} s | "
              f"{max(rss for _, rss in runs):.0f} MB |")  # fmt: skip
    for library in ("duckdb", "polars") if polars else ("duckdb",):
        python = args.polars_python if library == "polars" else sys.executable
        walls = sorted(run(f"import {library}", python=python)[0] for _ in range(args.repeat))
        print(
            f"| import | {library} | {statistics.median(walls):.2f} s | {walls[0]:.2f}–{walls[-1]:.2f} s | |"
        )
    if polars:
        print("\n| line | what the contract needs | DuckDB | polars |\n|---|---|---|---|")
        for row in fidelity(args.polars_python):
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")


if __name__ == "__main__":
    main()
