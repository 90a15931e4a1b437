"""The one retry policy of every step: an infrastructure blip (S3 or the trace store unreachable for
half a minute, the SUT or the LLM judge answering 5xx) costs a retry, not the run.

Every asset, op and asset check of a service takes :func:`step_retries` — the steps that read or write
the work and reports folders, the trace store, the values between steps (an S3 IO manager: loading an
input is part of the step, and is retried with it), the SUT (the replay) or the judge. A retry
re-executes the step whole; what it already did is kept where it is idempotent (the replay's answer
store asks only the cases still unanswered; an alert already queued is not news again).

Dagster's ``RetryPolicy`` retries any exception. A user error is not retried: ``defs.metadata.
user_errors`` turns an ``InputError`` (a malformed golden set, a changed lock, a stale baseline) into a
``dg.Failure(allow_retries=False)``, which Dagster never retries, and only a ``SourceError`` (a location
that cannot be reached) into a retryable one. A bug (any other exception) is retried too, so the
retries stay few: :data:`MAX_RETRIES`, then the step fails with its error, and the run's failure alert
names it.

The waits grow exponentially with a jitter of ± the base delay (Dagster's ``Backoff.EXPONENTIAL`` and
``Jitter.PLUS_MINUS``: the n-th retry waits ``(2**n - 1) * delay ± delay``): with the default 15 s, the
first retry comes 0–30 s after the failure, the second 30–60 s after that, so the last attempt is at
least 30 s after the first failed one, and parallel steps that failed together do not retry in
lockstep. ``RAGSPINE_STEP_RETRY_DELAY_S`` sets the base delay (read when the definitions load; 0 retries
at once, as the tests do) and ``RAGSPINE_STEP_RETRIES`` the number of retries (0 to 10; 0: a failed step
fails the run at once, as a test of a failure wants).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg

from ragspine_pipeline.errors import InputError

MAX_RETRIES = 2
DEFAULT_DELAY_S = 15.0
DELAY_ENV = "RAGSPINE_STEP_RETRY_DELAY_S"
RETRIES_ENV = "RAGSPINE_STEP_RETRIES"

STEP_RETRIES = dg.RetryPolicy(
    max_retries=MAX_RETRIES,
    delay=DEFAULT_DELAY_S,
    backoff=dg.Backoff.EXPONENTIAL,
    jitter=dg.Jitter.PLUS_MINUS,
)


def step_retries(env: Mapping[str, str] = os.environ) -> dg.RetryPolicy:
    """:data:`STEP_RETRIES`, with ``RAGSPINE_STEP_RETRY_DELAY_S`` as its base delay and
    ``RAGSPINE_STEP_RETRIES`` as its number of retries where they are set."""
    delay = _setting(env, DELAY_ENV, float, 3600, "a number of seconds", STEP_RETRIES.delay)
    retries = _setting(env, RETRIES_ENV, int, 10, "a whole number of retries", MAX_RETRIES)
    return dg.RetryPolicy(
        max_retries=retries, delay=delay, backoff=STEP_RETRIES.backoff, jitter=STEP_RETRIES.jitter
    )


def _setting(env: Mapping[str, str], name: str, kind: type, most: float, what: str, default):
    """The value of ``name`` in ``env`` (``default`` when unset or blank), from 0 to ``most``."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if not 0 <= value <= most:
        raise InputError(name, f"not {what} from 0 to {most:g}: {text!r}")
    return value
