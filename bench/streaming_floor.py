"""Benchmark: the memory floor a streaming scorer would meet on today's read (issue 49).

    python bench/streaming_floor.py GOLD TRACES [--what guard|read|traces|gold|both]

Runs one of the loads the way a scorer that never holds the traces would: the same typed fast read
and canonical statement as ``ragspine-eval score`` (every input rule of the fast read, the line guard
beside it), each canonical batch dropped as it comes. ``both`` holds the golden set (as the scorer
must, for its per-case rows) while the traces stream beside it. Prints the wall time and the process's
peak resident set. The files are ``bench_score.py``'s (``--generate-only``).
"""

from __future__ import annotations

import argparse
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ragspine_pipeline import duck, line_guards
from ragspine_pipeline.contracts import fast
from ragspine_pipeline.contracts.columns import _GOLD, _TRACE, _source, load_gold  # the loader's own parts

BATCH_ROWS = 1 << 17


def stream(path: Path, kind) -> int:
    """Rows of ``path`` through the fast read and the canonical statement, none of them kept."""

    def consume(typed) -> int:
        sql = kind.sql(_source(typed.schema, kind.model, "typed"))
        return sum(batch.num_rows for batch in duck.batches(sql, BATCH_ROWS, typed=typed))

    with ThreadPoolExecutor(max_workers=1) as pool:
        plain = pool.submit(line_guards.plain_json_lines, path)
        rows = fast.read_typed(path, kind.model, kind.record_only, kind.derived, consume)
        if not plain.result() or rows is None:
            raise SystemExit(f"{path}: the fast read cannot vouch for it (the record reader's)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gold", type=Path)
    parser.add_argument("traces", type=Path)
    parser.add_argument("--what", choices=["guard", "read", "traces", "gold", "both"], default="both")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.what == "guard":
        line_guards.plain_json_lines(args.traces)
    elif args.what == "read":
        fast.read_typed(args.traces, _TRACE.model, _TRACE.record_only, _TRACE.derived,
                        lambda batches: sum(batch.num_rows for batch in batches))  # fmt: skip
    elif args.what == "traces":
        stream(args.traces, _TRACE)
    elif args.what == "gold":
        stream(args.gold, _GOLD)
    else:
        with ThreadPoolExecutor(max_workers=1) as pool:
            gold = pool.submit(load_gold, args.gold)
            stream(args.traces, _TRACE)
            gold.result()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"{args.what}: {time.perf_counter() - start:.2f} s, peak RSS {peak} MB")


if __name__ == "__main__":
    main()
