"""Bounded-concurrency client for an OpenAI-compatible chat-completions judge endpoint.

:class:`JudgeClient` sends many chat-completion requests to any OpenAI-compatible endpoint (configured by
``RAGSPINE_JUDGE_*`` environment variables, see :meth:`JudgeEndpoint.from_env`) through
``openai.AsyncOpenAI`` with at most ``endpoint.concurrency`` requests in flight, behind a synchronous API.
Retries with backoff are the SDK's own (429 / 408 / 409 / 5xx / timeouts / connection errors;
``Retry-After`` and ``retry-after-ms`` are honoured).

Budget: before sending each call, if the calls sent so far reach ``Budget.max_calls``, or the call's
estimated tokens (:func:`estimated_tokens`: its prompt and its completion limit) do not fit in what
``Budget.max_tokens`` has left, the call is not sent and gets status ``"budget"`` with the estimate and
the remainder in its error. What is left is ``max_tokens`` minus the tokens counted for finished calls
(the usage the endpoint reports; its estimate when it reports none) and minus the estimates of the calls
in flight, so concurrent calls cannot overshoot the budget either. A call retried by the SDK counts once.
The first call the budget refuses stops the client (:attr:`JudgeClient.stopped` says where and why):
no later call is sent, even a smaller one that would fit. Otherwise the judged cases would be the short
ones, and every mean would lean towards short answers; stopped, they are the calls sent before the stop.
The budget and the accounting are per :class:`JudgeClient` instance and accumulate across
``complete_all`` calls.

Per-call failures never raise; each request gets a :class:`ChatResult` whose ``status`` is
``"ok"``; ``"error"`` (an HTTP error after the SDK's retries, a timeout, an unparseable or empty reply);
``"unreachable"`` (connection refused / DNS failure after the retries); or ``"budget"`` (not sent).
The API key never appears in an error message, a log record or the ``repr`` of any object here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

NO_KEY_PLACEHOLDER = "no-key"  # the SDK insists on a key; local endpoints usually ignore it
_MAX_ERROR_CHARS = 240


@dataclass(frozen=True)
class JudgeEndpoint:
    base_url: str
    models: tuple[str, ...]
    api_key: str = field(default="", repr=False)
    timeout_s: float = 60.0
    max_retries: int = 4
    concurrency: int = 16

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("JudgeEndpoint needs at least one model")
        if self.concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("JudgeEndpoint needs concurrency >= 1, max_retries >= 0 and timeout_s > 0")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> JudgeEndpoint | None:
        """The endpoint set by the ``RAGSPINE_JUDGE_*`` variables, or None when judging is not configured."""
        base_url = environ.get("RAGSPINE_JUDGE_BASE_URL", "").strip()
        models = tuple(m.strip() for m in environ.get("RAGSPINE_JUDGE_MODEL", "").split(",") if m.strip())
        if not base_url or not models:
            return None
        kwargs: dict = {}
        for name, attr, kind, minimum in (
            ("RAGSPINE_JUDGE_CONCURRENCY", "concurrency", int, 1),
            ("RAGSPINE_JUDGE_TIMEOUT", "timeout_s", float, None),
            ("RAGSPINE_JUDGE_MAX_RETRIES", "max_retries", int, 0),
        ):
            value = env_number(name, kind, minimum, environ)
            if value is not None:
                kwargs[attr] = value
        api_key = environ.get("RAGSPINE_JUDGE_API_KEY", "").strip()
        return cls(base_url=base_url, models=models, api_key=api_key, **kwargs)


def env_number(
    name: str, kind: type = int, minimum: int | None = 1, environ: Mapping[str, str] = os.environ
) -> int | float | None:
    """The number in the environment variable ``name``, None when it is unset or blank. ``minimum`` None
    means "greater than 0". A ValueError names the variable (never its value, which may be a secret
    pasted into the wrong variable)."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}") from None
    if (minimum is not None and value < minimum) or (minimum is None and not value > 0):
        raise ValueError(f"{name} must be {'>= ' + str(minimum) if minimum is not None else '> 0'}")
    return value


@dataclass(frozen=True)
class Budget:
    max_calls: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class BudgetStop:
    """Where the budget stopped a client: the first call it refused (``key``, ``model``), which limit
    (``"tokens"`` or ``"calls"``), that call's estimate, what was left and the limit itself."""

    key: str
    model: str
    limit_kind: str
    estimate: int
    left: int
    limit: int


@dataclass(frozen=True)
class ChatRequest:
    key: str
    model: str
    messages: tuple[dict, ...]
    max_tokens: int = 256
    temperature: float = 0.0


@dataclass(frozen=True)
class ChatResult:
    key: str
    model: str
    status: str  # "ok" | "error" | "unreachable" | "budget"
    text: str | None
    error: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 0


def estimated_tokens(request: ChatRequest) -> int:
    """A conservative token count of ``request`` before it is sent: its messages' UTF-8 bytes / 3 (a
    tokeniser gives about 4 bytes a token in English and 3 a character in CJK scripts), plus 8 per
    message, plus the completion limit ``max_tokens``."""
    size = sum(len(str(m.get("content", "")).encode("utf-8", "surrogatepass")) for m in request.messages)
    return -(-size // 3) + 8 * len(request.messages) + request.max_tokens


class JudgeClient:
    def __init__(self, endpoint: JudgeEndpoint, budget: Budget = Budget()) -> None:
        self.endpoint = endpoint
        self.budget = budget
        self._lock = threading.Lock()
        self._counts = {"calls": 0, "ok": 0, "errors": 0, "unreachable": 0, "budget_skipped": 0}
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._reserved = 0  # estimated tokens of the calls in flight
        self._latencies: list[float] = []
        self._stop: BudgetStop | None = None

    def __repr__(self) -> str:
        return f"JudgeClient(endpoint={self.endpoint!r}, budget={self.budget!r})"

    # -- public API ------------------------------------------------------------------------------------
    def complete_all(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """One result per request, in order. Safe without an event loop, inside one, and repeatedly."""
        requests = list(requests)
        if not requests:
            return []
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._complete_all(requests))
        # Called from a thread that runs a loop (an async caller): run ours on a worker thread.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="judge-client") as pool:
            return pool.submit(asyncio.run, self._complete_all(requests)).result()

    @property
    def stopped(self) -> BudgetStop | None:
        """The call at which the budget stopped this client, or None while it has not."""
        with self._lock:
            return self._stop

    @property
    def usage(self) -> dict:
        with self._lock:
            latencies = list(self._latencies)
            usage: dict = dict(self._counts)
            usage.update(
                prompt_tokens=self._prompt_tokens,
                completion_tokens=self._completion_tokens,
                budget_exhausted=self._budget_reached(),
            )
        usage["latency_s_total"] = float(sum(latencies))
        usage["latency_s_p50"] = float(np.percentile(latencies, 50)) if latencies else None
        usage["latency_s_p95"] = float(np.percentile(latencies, 95)) if latencies else None
        return usage

    # -- internals -------------------------------------------------------------------------------------
    def _budget_reached(self) -> bool:  # call with the lock held
        b = self.budget
        return (
            self._stop is not None
            or (b.max_calls is not None and self._counts["calls"] >= b.max_calls)
            or (b.max_tokens is not None and self._prompt_tokens + self._completion_tokens >= b.max_tokens)
        )

    def _over_budget(self, req: ChatRequest, estimate: int) -> str | None:  # call with the lock held
        """Why ``req``, estimated at ``estimate`` tokens, may not be sent, or None. The first refusal
        stops the client: every later call is refused with it."""
        if self._stop is not None:
            limit = "token" if self._stop.limit_kind == "tokens" else "call"
            return f"not sent: the {limit} budget stopped judging at an earlier call"
        b = self.budget
        if b.max_calls is not None and self._counts["calls"] >= b.max_calls:
            self._stop = BudgetStop(req.key, req.model, "calls", estimate, 0, b.max_calls)
            return f"call budget of {b.max_calls} spent, not sent"
        if b.max_tokens is not None:
            left = b.max_tokens - self._prompt_tokens - self._completion_tokens - self._reserved
            if estimate > left:
                left = max(left, 0)
                self._stop = BudgetStop(req.key, req.model, "tokens", estimate, left, b.max_tokens)
                return f"token budget: estimated {estimate} tokens > {left} left of {b.max_tokens}, not sent"
        return None

    async def _complete_all(self, requests: list[ChatRequest]) -> list[ChatResult]:
        import openai  # deferred: the SDK takes ~0.6 s to import, paid only by runs that judge

        ep = self.endpoint
        client = openai.AsyncOpenAI(
            base_url=ep.base_url,
            api_key=ep.api_key or NO_KEY_PLACEHOLDER,
            timeout=ep.timeout_s,
            max_retries=ep.max_retries,
        )
        semaphore = asyncio.Semaphore(ep.concurrency)
        try:
            return list(await asyncio.gather(*(self._one(client, semaphore, r) for r in requests)))
        finally:
            await client.close()

    async def _one(
        self, client: openai.AsyncOpenAI, semaphore: asyncio.Semaphore, req: ChatRequest
    ) -> ChatResult:
        estimate = estimated_tokens(req)
        async with semaphore:
            with self._lock:
                refusal = self._over_budget(req, estimate)
                if refusal is not None:
                    self._counts["budget_skipped"] += 1
                    return ChatResult(req.key, req.model, "budget", None, refusal)
                self._counts["calls"] += 1
                self._reserved += estimate
            start = time.perf_counter()
            result = await self._send(client, req)
            latency = time.perf_counter() - start
        result = dataclasses.replace(result, latency_s=latency)
        reported = result.prompt_tokens + result.completion_tokens
        with self._lock:
            self._counts[{"ok": "ok", "error": "errors", "unreachable": "unreachable"}[result.status]] += 1
            self._reserved -= estimate
            if reported or result.status != "ok":
                self._prompt_tokens += result.prompt_tokens
                self._completion_tokens += result.completion_tokens
            else:  # an endpoint that reports no usage: count what the call was estimated to cost
                self._prompt_tokens += estimate - req.max_tokens
                self._completion_tokens += req.max_tokens
            self._latencies.append(latency)
        log.debug(
            "judge call %s (%s): %s after %d attempt(s)", req.key, req.model, result.status, result.attempts
        )
        return result

    async def _send(self, client: openai.AsyncOpenAI, req: ChatRequest) -> ChatResult:
        import openai

        def failed(status: str, attempts: int, message: str, p_tok: int = 0, c_tok: int = 0) -> ChatResult:
            return ChatResult(
                req.key, req.model, status, None, self._clean(message), p_tok, c_tok, 0.0, attempts
            )

        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=req.model,
                messages=list(req.messages),
                max_tokens=req.max_tokens,
                temperature=req.temperature,
            )
        except openai.APIStatusError as err:
            attempts = _attempts(err.request)
            return failed("error", attempts, f"HTTP {err.status_code} after {_n(attempts)}: {_detail(err)}")
        except openai.APITimeoutError as err:
            attempts = _attempts(err.request)
            return failed(
                "error", attempts, f"timed out after {_n(attempts)} ({self.endpoint.timeout_s:g}s each)"
            )
        except openai.APIConnectionError as err:
            attempts, reason = _attempts(err.request), _connection_reason(err)
            status = (
                "unreachable"
                if reason in ("connection refused", "DNS failure", "cannot connect")
                else "error"
            )
            return failed(status, attempts, f"{reason} after {_n(attempts)}")
        except Exception as err:  # never raise for one call
            return failed("error", 1, f"request failed: {type(err).__name__}: {err}")

        attempts = raw.retries_taken + 1
        try:
            completion = raw.parse()
            usage = getattr(completion, "usage", None)
            p_tok = int(getattr(usage, "prompt_tokens", 0) or 0)
            c_tok = int(getattr(usage, "completion_tokens", 0) or 0)
        except Exception as err:
            return failed("error", attempts, f"unparseable response body: {type(err).__name__}")
        try:
            text = completion.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            return failed("error", attempts, "unparseable response body: no choices[0].message", p_tok, c_tok)
        if not isinstance(text, str):
            return failed("error", attempts, "reply has no message content", p_tok, c_tok)
        return ChatResult(req.key, req.model, "ok", text, None, p_tok, c_tok, 0.0, attempts)

    def _clean(self, message: str) -> str:
        """One line, bounded, with the API key (if any) scrubbed."""
        message = " ".join(str(message).split())
        if self.endpoint.api_key:
            message = message.replace(self.endpoint.api_key, "***")
        return message if len(message) <= _MAX_ERROR_CHARS else message[: _MAX_ERROR_CHARS - 3] + "..."


def _n(attempts: int) -> str:
    return f"{attempts} attempt" + ("" if attempts == 1 else "s")


def _attempts(request: object) -> int:
    """HTTP attempts of a failed call: the SDK stamps ``x-stainless-retry-count`` on every (re)try it builds,
    and the exception carries the last request."""
    try:
        return int(request.headers["x-stainless-retry-count"]) + 1  # type: ignore[attr-defined]
    except (AttributeError, KeyError, TypeError, ValueError):
        return 1


def _detail(err: openai.APIStatusError) -> str:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return str(message)
    return err.message


def _connection_reason(err: BaseException) -> str:
    """Why a connection failed, from the exception chain (httpx2 -> httpcore2 -> OSError)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    connect_error = False
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        text = str(cause).lower()
        if isinstance(cause, ConnectionRefusedError) or "connection refused" in text:
            return "connection refused"
        if isinstance(cause, socket.gaierror) or "name or service not known" in text:
            return "DNS failure"
        connect_error = connect_error or type(cause).__name__ == "ConnectError"
        cause = cause.__cause__ or cause.__context__
    return "cannot connect" if connect_error else f"connection error ({type(err.__cause__ or err).__name__})"
