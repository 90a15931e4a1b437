"""Benchmark: 500 LLM judgments against a loopback judge with a fixed latency, then the cached re-run.

    python bench/bench_judge.py [--n 500] [--concurrency 16] [--latency 0.2]

Starts the fake OpenAI-compatible server of tests/judge/fake_judge.py on loopback, answering every
request after ``--latency`` seconds, and judges ``--n`` cases on ``answer_relevancy`` with one model
through the whole judging path (``judge.run.run_judge``: prompts, bounded-concurrency client, strict
parsing, a local judgment cache). Reports the wall time against the ideal ``n × latency / concurrency``
(target: ≤ 1.5 ×), the most requests the server saw in flight, and then runs the same cases again:
unchanged answers must make zero calls. Results: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ragspine_pipeline.judge.cache import LocalJudgmentCache
from ragspine_pipeline.judge.client import JudgeClient, JudgeEndpoint
from ragspine_pipeline.judge.prompts import JudgeItem
from ragspine_pipeline.judge.run import JudgeSettings, run_judge
from tests.judge.fake_judge import FakeJudge

TARGET_RATIO = 1.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args(argv)

    items = [
        JudgeItem(
            f"q{i:06d}", question=f"How long is freeze window {i}?", answer=f"It lasts {i % 9 + 1} days."
        )
        for i in range(args.n)
    ]
    settings = JudgeSettings(metrics=("answer_relevancy",))
    with FakeJudge(latency_s=args.latency) as fake, tempfile.TemporaryDirectory() as folder:
        endpoint = JudgeEndpoint(base_url=fake.url, models=("fake-judge",), concurrency=args.concurrency)
        cache = LocalJudgmentCache(Path(folder))
        start = time.perf_counter()
        first = run_judge(items, settings, JudgeClient(endpoint), cache)
        wall = time.perf_counter() - start
        calls_first = len(fake.requests)
        start = time.perf_counter()
        second = run_judge(items, settings, JudgeClient(endpoint), cache)
        wall_second = time.perf_counter() - start
        calls_second = len(fake.requests) - calls_first
        max_in_flight = fake.max_in_flight

    ideal = args.n * args.latency / args.concurrency
    ratio = wall / ideal
    judged = sum(score is not None for score in first.scores("answer_relevancy"))
    usage = first.usage
    print(f"n={args.n} concurrency={args.concurrency} latency={args.latency}s")
    print(f"first run      : {wall:.3f} s for {judged} judgments, {calls_first} calls")
    print(f"ideal          : {ideal:.3f} s  (n * latency / concurrency)")
    verdict = "OK" if ratio <= TARGET_RATIO else "SLOW"
    print(f"ratio          : {ratio:.3f}  (target <= {TARGET_RATIO}) {verdict}")
    print(f"max in flight  : {max_in_flight}")
    print(f"latency / call : p50 {usage['latency_s_p50']:.3f} s, p95 {usage['latency_s_p95']:.3f} s")
    print(f"second run     : {wall_second:.3f} s, {calls_second} calls, cache {second.cache}")
    return 0 if judged == args.n and calls_second == 0 and ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
