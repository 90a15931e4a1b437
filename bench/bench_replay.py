"""Benchmark: replaying a golden set against a loopback RAG service that takes 200 ms per answer.

    python bench/bench_replay.py [--cases 1000] [--delay 0.2] [--concurrency 16] [--repeat 3]
                                 [--rps 20 --rps-cases 400]

1. ``--cases`` questions, ``--concurrency`` in flight, no cap: the wall time of ``replay()`` (HTTP
   client, answer store on disk, contract validation, the traces file) against the ideal
   ``cases / concurrency × delay``. Target: ≤ 1.3 × the ideal (12.5 s for 1,000 at 16 and 200 ms).
2. The same with ``max_rps``: the rate the service measured (questions arrived, first to last) against
   the cap. Target: within 5 % of it.

The service is ``tests/fake_rag_service.py`` (a threading HTTP server in this process, answering the
examples' traces under new ids); every answer goes through the answer store, as in the pipeline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragspine_pipeline.sources.replay import AnswerStore, replay  # noqa: E402
from ragspine_pipeline.sources.sut import HttpSut  # noqa: E402
from tests.fake_rag_service import FakeRagService  # noqa: E402


def cases(n: int) -> tuple[list[tuple[str, str, None]], dict[str, dict]]:
    examples = [json.loads(line) for line in (ROOT / "examples/wfgy/traces.jsonl").read_text().splitlines()]
    traces, questions = {}, []
    for i in range(n):
        qid = f"case-{i:05d}"
        traces[qid] = {**examples[i % len(examples)], "qid": qid}
        questions.append((qid, traces[qid]["q"], None))
    return questions, traces


def one_replay(n: int, delay: float, concurrency: int, rps: float | None) -> tuple[float, float, int]:
    """(wall seconds, arrival rate per second at the service, traces written)."""
    questions, traces = cases(n)
    with FakeRagService(traces, delay_s=delay) as service, tempfile.TemporaryDirectory() as tmp:
        settings = HttpSut(url=service.url, concurrency=concurrency, max_rps=rps)
        client = settings.client()
        started = time.monotonic()
        result = replay(
            questions,
            client.answer,
            out=Path(tmp) / "traces.jsonl",
            quarantine=Path(tmp) / "quarantine.jsonl",
            concurrency=concurrency,
            store=AnswerStore(Path(tmp) / "answers", settings.identity(), "bench"),
        )
        wall = time.monotonic() - started
        arrivals = sorted(service.arrivals)
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    return wall, rate, result.answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rps", type=float, default=20.0)
    parser.add_argument("--rps-cases", type=int, default=400)
    args = parser.parse_args()
    machine = f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"{machine}, load {os.getloadavg()[0]:.2f}")
    ideal = args.cases / args.concurrency * args.delay
    walls = []
    for _ in range(args.repeat):
        wall, _rate, answered = one_replay(args.cases, args.delay, args.concurrency, None)
        assert answered == args.cases, answered
        walls.append(wall)
        print(
            f"  {args.cases} cases, concurrency {args.concurrency}, {args.delay * 1000:.0f} ms: {wall:.2f} s "
            f"({wall / ideal:.3f} x the ideal {ideal:.2f} s)"
        )
    median = statistics.median(walls)
    print(f"median {median:.2f} s = {median / ideal:.3f} x ideal (target <= 1.3)")
    rates = []
    for _ in range(args.repeat):
        wall, rate, answered = one_replay(args.rps_cases, args.delay, args.concurrency, args.rps)
        assert answered == args.rps_cases, answered
        rates.append(rate)
        print(
            f"  {args.rps_cases} cases capped at {args.rps:g}/s: {rate:.3f}/s at the service "
            f"({(rate / args.rps - 1) * 100:+.2f} %), {wall:.2f} s"
        )
    worst = max(abs(rate / args.rps - 1) for rate in rates)
    print(f"worst deviation from the cap {worst * 100:.2f} % (target <= 5 %)")


if __name__ == "__main__":
    main()
