"""The S3 side of ``ragspine-eval deploy``: every bucket the settings name (``check``: is each there and
reachable; ``bootstrap``: create it), and the objects a first run reads, seeded from a folder laid out
as ``RAGSPINE_HOME`` is. An object that exists is never replaced (a baseline only ratchets)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ragspine_pipeline.cli.args import UsageError
from ragspine_pipeline.sources.s3 import aws_cause, is_not_found, parse_s3_uri, s3_client
from ragspine_pipeline.sources.trace_store import LocalTraceStore

# The objects a first run reads, each setting with its place in a RAGSPINE_HOME-style folder (the
# demo instance's defaults, ``services/demo/defs.yaml``): what ``bootstrap --from`` seeds.
SEEDS = (
    ("RAGSPINE_TRACE_STORE", "traces"),  # a folder: dt=YYYY-MM-DD/*.jsonl[.gz]
    ("RAGSPINE_INDEX_MANIFEST", "index/manifest.json"),
    ("RAGSPINE_EXTRACTION_FACTS", "extraction/facts.jsonl"),
    ("RAGSPINE_BASELINE", "baseline.json"),
    ("RAGSPINE_EXTRACTION_BASELINE", "extraction/baseline.json"),
)
# Every setting that may name an S3 location: the buckets a deployment needs.
S3_SETTINGS = (
    *(name for name, _ in SEEDS),
    "RAGSPINE_IO_URI",
    "RAGSPINE_REPORTS",
    "RAGSPINE_WORK",
    "RAGSPINE_JUDGE_CACHE",
)
# Step logs (deploy/celery, deploy/k8s): a bucket name, on the endpoint the instance config gives it.
COMPUTE_LOG_BUCKET, COMPUTE_LOG_ENDPOINT = "DAGSTER_COMPUTE_LOG_BUCKET", "DAGSTER_S3_ENDPOINT_URL"


def bootstrap(
    env: Mapping[str, str], targets: dict[tuple[str | None, str], list[str]], source: Path | None
) -> Iterator[str]:
    """``deploy bootstrap``'s lines: each bucket of ``targets`` (:func:`s3_targets`) created or found,
    then, from ``source``, each seed uploaded where its setting names an S3 location."""
    clients: dict[str | None, Any] = {}
    for (endpoint, bucket), names in targets.items():
        client = clients.setdefault(endpoint, _client(env, endpoint))
        yield f"bucket {bucket}: {_create_bucket(client, bucket, s3_region(env))} ({', '.join(names)})"
    if source is not None:
        client = clients.setdefault(s3_endpoint(env), _client(env, s3_endpoint(env)))
        for name, place in SEEDS:
            uri = env.get(name) or ""
            if uri.startswith("s3://"):
                yield f"{name}: {_seed(client, source / place, uri)}"


def s3_problems(env: Mapping[str, str]) -> list[str]:
    """Credentials, region and buckets for every S3 location the settings name; [] when all is there."""
    targets = s3_targets(env)
    if not targets:
        return []
    import boto3

    session = boto3.session.Session()
    problems = []
    if not (session.region_name or s3_endpoint(env)):
        problems.append(
            "AWS region: not set (AWS_REGION, or RAGSPINE_S3_ENDPOINT_URL for an S3-compatible store)"
        )
    if session.get_credentials() is None:
        problems.append(
            "AWS credentials: none found (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or a role)"
        )
        return problems  # every bucket would fail the same way
    clients: dict[str | None, Any] = {}
    for (endpoint, bucket), names in targets.items():
        client = clients.setdefault(endpoint, _client(env, endpoint))
        if problem := _bucket_problem(client, bucket):
            problems.append(f"bucket {bucket} ({', '.join(names)}): {problem}")
    return problems


def s3_endpoint(env: Mapping[str, str]) -> str | None:
    return env.get("RAGSPINE_S3_ENDPOINT_URL") or None


def s3_region(env: Mapping[str, str]) -> str | None:
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def _client(env: Mapping[str, str], endpoint: str | None):
    return s3_client(endpoint_url=endpoint, region=s3_region(env), max_attempts=2)


def s3_targets(env: Mapping[str, str]) -> dict[tuple[str | None, str], list[str]]:
    """``{(endpoint, bucket): [settings naming it]}``, in the order the settings are declared."""
    targets: dict[tuple[str | None, str], list[str]] = {}
    for name in S3_SETTINGS:
        uri = env.get(name) or ""
        if uri.startswith("s3://"):
            bucket, _ = parse_s3_uri(uri)
            targets.setdefault((s3_endpoint(env), bucket), []).append(name)
    if bucket := env.get(COMPUTE_LOG_BUCKET):
        endpoint = env.get(COMPUTE_LOG_ENDPOINT) or s3_endpoint(env)
        targets.setdefault((endpoint, bucket), []).append(COMPUTE_LOG_BUCKET)
    return targets


def _bucket_problem(client, bucket: str) -> str | None:
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code in ("404", "NoSuchBucket", "NotFound"):
            return "does not exist (`ragspine-eval deploy bootstrap` creates it)"
        return f"not accessible: {aws_cause(exc)}"
    except BotoCoreError as exc:
        return f"cannot reach S3: {aws_cause(exc)}"
    return None


def _create_bucket(client, bucket: str, region: str | None) -> str:
    if _bucket_problem(client, bucket) is None:
        return "exists"
    options = {}
    if region and region != "us-east-1":  # S3 refuses an explicit us-east-1 constraint
        options["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(Bucket=bucket, **options)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "BucketAlreadyOwnedByYou":
            return "exists"
        raise UsageError(f"deploy bootstrap: cannot create bucket {bucket}: {aws_cause(exc)}") from None
    except BotoCoreError as exc:
        raise UsageError(f"deploy bootstrap: cannot create bucket {bucket}: {aws_cause(exc)}") from None
    return "created"


def _seed(client, local: Path, uri: str) -> str:
    """Upload ``local`` (a file, or a trace folder's day partitions) to ``uri``; keep what is there."""
    if not local.exists():
        return f"nothing to seed ({local} does not exist)"
    bucket, key = parse_s3_uri(uri)
    if local.is_file():
        files = [(local, key)]
    else:
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""
        store = LocalTraceStore(local)  # its days and trace objects, by the trace store's own rule
        files = [
            (local / f"dt={day}" / name, f"{prefix}dt={day}/{name}")
            for day in store.days()
            for name in store.objects(day)
        ]
    uploaded = 0
    for path, name in files:
        if not _exists(client, bucket, name):
            try:
                client.upload_file(str(path), bucket, name)
            except (BotoCoreError, ClientError) as exc:
                raise UsageError(f"deploy bootstrap: cannot upload {path}: {first_line(exc)}") from None
            uploaded += 1
    return f"{uploaded} uploaded, {len(files) - uploaded} kept as they were ({uri})"


def _exists(client, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if is_not_found(exc):
            return False
        raise UsageError(f"deploy bootstrap: cannot read s3://{bucket}/{key}: {aws_cause(exc)}") from None
    except BotoCoreError as exc:
        raise UsageError(f"deploy bootstrap: cannot read s3://{bucket}/{key}: {aws_cause(exc)}") from None
    return True


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
