"""Benchmark: sampling one day of production traces (issue 7).

    python bench/bench_sampling.py [--traces 1000000] [--files 8] [--n 1000] [--repeat 3] [--s3]

Generates (once, cached under bench/data/sampling-<traces>/) a day of gzipped JSONL traces in the
trace-store layout ``dt=YYYY-MM-DD/part-NNNNN.jsonl.gz``: traces of ~900 bytes with tags, claims,
citations, latency, tokens and non-repeating text (~250 bytes each after gzip), 0.1 % duplicates and
0.01 % malformed lines. Then times, each in a fresh process with its own peak RSS (``ru_maxrss``):

* ``parse-only``: decompress and ``json.loads`` every line of the same files (the yardstick);
* ``sample``: ``ragspine-eval sample --source <dir> --date D --n N --seed 7 --stratify channel``;
* with ``--s3``: the same through a moto S3 server on loopback (``moto_server``, its own process).

Targets (issue 7, 2-core machine): peak RSS ≤ 300 MB and growing ≤ 20 % from 1M to 4M traces; wall
≤ 1.5 × parse-only; through S3 within 2 × the local figure. Results: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DAY = "2026-11-21"
CHANNELS, WORKFLOWS = ("slack", "web", "api"), ("expenses", "oncall", "release-freeze", "access-requests")

PARSE_ONLY = """
import gzip, json, sys
from pathlib import Path
n = 0
for path in sorted(Path(sys.argv[1]).rglob("*.jsonl.gz")):
    with gzip.open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                try:
                    json.loads(line)
                except ValueError:
                    pass
                n += 1
print(n)
"""


def generate(folder: Path, traces: int, files: int, seed: int = 7) -> Path:
    day_dir = folder / f"dt={DAY}"
    done = folder / ".complete"
    if done.exists():
        return folder
    day_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = -(-traces // files)
    written = 0
    for part in range(files):
        count = min(per_file, traces - written)
        with gzip.open(day_dir / f"part-{part:05d}.jsonl.gz", "wt", encoding="utf-8", compresslevel=1) as out:
            channel = rng.choice(len(CHANNELS), count, p=(0.55, 0.3, 0.15))
            workflow = rng.integers(0, len(WORKFLOWS), count)
            latency = rng.gamma(2.0, 300.0, count).round(1)
            for i in range(count):
                rid = f"r{written + i:09d}"
                if rng.random() < 0.0001:
                    out.write('{"request_id": "' + rid + '", "answer": \n')  # truncated line
                    continue
                trace = {
                    "request_id": rid,
                    "ts": f"{DAY}T{(written + i) % 24:02d}:00:00Z",
                    "question": "How long is the release freeze before a major launch?",
                    "retrieved_ids": [f"doc{(i + k) % 97}#{k}" for k in range(5)],
                    "answer": {
                        "claim": "The freeze starts five working days before a major launch.",
                        "citations": [f"doc{i % 97}#0"],
                    },
                    # What real traces carry and the demo does not: text that does not repeat. About 250
                    # bytes a trace after gzip, so a day of 1M traces is a few hundred MB.
                    "context_digest": rng.bytes(160).hex(),
                    "latency_ms": float(latency[i]),
                    "token_usage": {"prompt_tokens": 240 + i % 50, "completion_tokens": 30 + i % 20},
                    "tags": {"channel": CHANNELS[channel[i]], "workflow": WORKFLOWS[workflow[i]]},
                }
                line = json.dumps(trace)
                out.write(line + "\n")
                if rng.random() < 0.001:
                    out.write(line + "\n")  # a retried request: the same id twice
        written += count
    done.write_text(str(traces))
    return folder


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    start = time.perf_counter()
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {process.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def report(name: str, runs: list[tuple[float, float]]) -> None:
    walls = [w for w, _ in runs]
    print(
        f"{name:<12} median {statistics.median(walls):6.2f} s (min {min(walls):.2f}, max {max(walls):.2f}); "
        f"peak RSS {max(m for _, m in runs):.0f} MiB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--s3", action="store_true")
    args = parser.parse_args()
    folder = generate(ROOT / "bench" / "data" / f"sampling-{args.traces}", args.traces, args.files)
    size = sum(p.stat().st_size for p in folder.rglob("*.jsonl.gz")) / 1e6
    print(f"{args.traces:,} traces in {args.files} gzipped files, {size:.0f} MB; cpus {os.cpu_count()}")
    out = folder / "sample.jsonl"
    sample = [
        sys.executable, "-m", "ragspine_pipeline.cli", "sample", "--source", str(folder), "--date", DAY,
        "--n", str(args.n), "--seed", "7", "--stratify", "channel", "--out", str(out),
    ]  # fmt: skip
    report("parse-only", [timed([sys.executable, "-c", PARSE_ONLY, str(folder)]) for _ in range(args.repeat)])
    report("sample", [timed(sample) for _ in range(args.repeat)])
    if args.s3:
        report("sample (s3)", s3_runs(folder, sample, args.repeat))


def s3_runs(folder: Path, sample: list[str], repeat: int) -> list[tuple[float, float]]:
    """The same sample through a moto S3 server on loopback (the upload is not timed).

    The server runs in its own process: a child's ``ru_maxrss`` starts from the size of the process it
    was forked from, and a server holding the day's objects would inflate every figure.
    """
    import socket

    import boto3

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        for _ in range(100):  # the server takes a moment to listen
            try:
                client.create_bucket(Bucket="traces")
                break
            except Exception:
                time.sleep(0.1)
        for path in sorted(folder.rglob("*.jsonl.gz")):
            client.upload_file(str(path), "traces", f"prod/{path.relative_to(folder).as_posix()}")
        command = [*sample]
        command[command.index("--source") + 1] = "s3://traces/prod"
        command += ["--endpoint-url", endpoint]
        return [timed(command, env) for _ in range(repeat)]
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
