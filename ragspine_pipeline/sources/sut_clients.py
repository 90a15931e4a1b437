"""Clients of the system under test (SUT): the HTTP client, the recorded traces and the Python function
that the settings of ``sources.sut`` open. Each answers one golden case at a time with a raw trace dict
(``contracts.trace``), or None when it has no answer for the case; an answer always carries the asked
qid, so that it joins to its case."""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import jmespath
import jmespath.exceptions
import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ReadTimeoutError
from urllib3.util import Retry

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.columns import load_traces
from ragspine_pipeline.contracts.jsonl import iter_records
from ragspine_pipeline.contracts.spans import SpanSettings, span_format, span_traces
from ragspine_pipeline.contracts.trace import Trace
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.errors import RefusedReply, SourceError

RETRY_STATUSES = (429, 500, 502, 503, 504)


@runtime_checkable
class SutClient(Protocol):
    def answer(self, qid: str, question: str, reference_date: str | None = None) -> dict | None:
        """The SUT's trace for one case (a raw trace dict), or None when it has no answer.

        ``reference_date`` (ISO) is the case's "today" for relative periods ("last year")."""
        ...

    def describe(self) -> str:
        """Which SUT this is, without credentials (for run metadata)."""
        ...


DEFAULT_BODY: dict[str, Any] = {
    "qid": "{qid}",
    "question": "{question}",
    "reference_date": "{reference_date}",
}
PLACEHOLDER = re.compile(r"\{(qid|question|reference_date)\}")
# A reply is kept as one trace line: the default leaves room under the readers' 8 MiB line cap.
DEFAULT_MAX_REPLY_BYTES = 4 << 20


def render_body(template: Any, qid: str, question: str, reference_date: str | None) -> Any:
    """The request body for one case: the template with its placeholders filled (see :class:`HttpSut`)."""
    values = {"qid": qid, "question": question, "reference_date": reference_date}
    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template)
        if whole:
            return values[whole.group(1)]
        return PLACEHOLDER.sub(lambda match: values[match.group(1)] or "", template)
    if isinstance(template, dict):
        rendered = {key: render_body(value, qid, question, reference_date) for key, value in template.items()}
        # A field that is just a placeholder without a value (a case with no reference date) is left out.
        return {
            key: value
            for key, value in rendered.items()
            if value is not None or not _is_placeholder(template[key])
        }
    if isinstance(template, list):
        return [render_body(value, qid, question, reference_date) for value in template]
    return template


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and PLACEHOLDER.fullmatch(value) is not None


class RateLimit:
    """At most ``per_second`` starts a second, shared by every thread: each caller takes the next free
    slot and sleeps until it. Twelve lines of our own rather than a dependency: no maintained library
    in this project's stack offers a blocking limiter for threads."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            time.sleep(slot - now)


class _Retry(Retry):
    # A Retry-After of hours (urllib3 honours up to six) would stall a whole replay on one case.
    MAX_RETRY_AFTER = 60.0

    def parse_retry_after(self, retry_after: str) -> float:
        return min(super().parse_retry_after(retry_after), self.MAX_RETRY_AFTER)


class HttpSutClient:
    """A SUT behind ``{method} {base_url}{path}``: by default ``POST`` of JSON ``{"qid", "question",
    "reference_date"}`` whose reply is the trace (see :class:`HttpSut` for the body template and the
    reply mapping).

    Retries (429 and 5xx, connection and read errors, honouring ``Retry-After``) are urllib3's, with
    exponential backoff from ``backoff`` seconds. After them, or when the body is not a JSON object,
    :class:`SourceError` names the URL (never the headers: they may carry a token) and the cause. Safe
    to share between threads: ``requests`` pools the connections, and ``max_rps`` is one limit for all.
    """

    def __init__(
        self,
        base_url: str,
        *,
        path: str = "/answer",
        method: str = "POST",
        timeout: float = 10,
        max_retries: int = 3,
        backoff: float = 0.2,
        headers: dict | None = None,
        body: dict | None = None,
        response: dict[str, str] | None = None,
        max_rps: float | None = None,
        concurrency: int = 8,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        base = urlsplit(base_url)
        joined = base.path.rstrip("/") + "/" + path.lstrip("/") if path else base.path
        self.url = urlunsplit(base._replace(path=joined))
        self.method = method
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_reply_bytes = max_reply_bytes
        # The whole answer, retries included, ends by then: a server that trickles bytes never holds a
        # replay (each socket read alone is bounded by ``timeout``, not the answer). Each attempt gets
        # its timeout and a second for the retry's pause.
        self.deadline_s = (timeout + 1) * (max_retries + 1)
        self.body = DEFAULT_BODY if body is None else body
        self.response = {name: jmespath.compile(expr) for name, expr in (response or {}).items()} or None
        self._limit = RateLimit(max_rps) if max_rps else None
        retry = _Retry(
            total=max_retries,
            backoff_factor=backoff,
            status_forcelist=RETRY_STATUSES,
            allowed_methods={method},  # answering is a read: repeating it is safe
            respect_retry_after_header=True,
            raise_on_status=False,  # the last response is reported by its status, below
        )
        self._session = requests.Session()
        for scheme in ("http://", "https://"):  # a connection kept for every question in flight
            self._session.mount(scheme, HTTPAdapter(max_retries=retry, pool_maxsize=max(concurrency, 10)))
        self._session.headers.update(headers or {})

    def describe(self) -> str:
        """The endpoint URL without user info, query or fragment (they may carry credentials)."""
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))

    def answer(self, qid: str, question: str, reference_date: str | None = None) -> dict:
        payload = render_body(self.body, qid, question, reference_date)
        if self._limit is not None:
            self._limit.wait()
        sent = {"params": payload} if self.method == "GET" else {"json": payload}
        status, reason, body = self._fetch(qid, sent)
        if 300 <= status < 400:  # never followed: the configured headers (a token) stay with this origin
            raise SourceError(
                self.describe(),
                f"HTTP {status} {reason}: a redirect, not followed (set the url in the SUT settings to "
                "the address that answers)",
            )
        if not 200 <= status < 300:
            retried = f" after {self.max_retries} retries" if status in RETRY_STATUSES else ""
            raise SourceError(self.describe(), f"HTTP {status} {reason}{retried}")
        try:  # behind the readers' caps: nesting, digits, UTF-8 (a NaN is the replay's to quarantine)
            reply = inputs.loads(body, self.describe())
        except (InputError, ValueError) as exc:
            message = exc.message if isinstance(exc, InputError) else ""
            if not message or message.startswith(("malformed JSON", "not UTF-8")):
                raise SourceError(self.describe(), f"the answer to qid={qid} is not JSON") from None
            raise RefusedReply(self.describe(), message) from None  # too deep, a huge number
        if not isinstance(reply, dict):
            raise SourceError(self.describe(), f"the answer to qid={qid} is not a JSON object")
        trace = reply if self.response is None else self._mapped(reply)
        return _with_qid(trace, qid, self.describe())

    def _fetch(self, qid: str, sent: dict) -> tuple[int, str, bytes]:
        """``(status, reason, body)`` of the question's answer, retries included, by
        :attr:`deadline_s`, its body at most :attr:`max_reply_bytes`; a SourceError otherwise. The
        request runs in a daemon thread the deadline abandons (its connection closed, or left to its
        own read timeout when the headers never came), so no server can hold the replay."""
        outcome: dict[str, Any] = {}
        done = threading.Event()
        abandoned = threading.Event()

        def fetch() -> None:
            try:
                response = self._session.request(
                    self.method, self.url, timeout=self.timeout, stream=True, allow_redirects=False, **sent
                )
                outcome["response"] = response
                if abandoned.is_set() or not 200 <= response.status_code < 300:
                    response.close()  # a redirect's or an error's body is never read
                    outcome["result"] = (response.status_code, response.reason, b"")
                    return
                outcome["result"] = (response.status_code, response.reason, self._body(qid, response))
            except BaseException as exc:  # reported by the asking thread, below
                outcome["error"] = exc
            finally:
                done.set()

        threading.Thread(target=fetch, name=f"sut-answer-{qid}"[:60], daemon=True).start()
        if not done.wait(self.deadline_s):
            abandoned.set()
            if (response := outcome.get("response")) is not None:
                _shut(response)  # ends the body's read at once (close() would wait for that read)
            raise SourceError(
                self.describe(), f"qid={qid}: no whole answer within {self.deadline_s:g} s (retries included)"
            )
        error = outcome.get("error")
        if isinstance(error, SourceError):
            raise error
        if isinstance(error, requests.RequestException):
            raise SourceError(self.describe(), _cause(error, self.max_retries, self.timeout)) from None
        if error is not None:
            raise error
        return outcome["result"]

    def _body(self, qid: str, response: requests.Response) -> bytes:
        """The body, at most :attr:`max_reply_bytes` (decoded); a larger one fails the case unread."""
        cap = self.max_reply_bytes
        try:
            declared = int(response.headers.get("Content-Length") or 0)
        except ValueError:
            declared = 0
        chunks, size = [], 0
        try:
            if declared <= cap:
                for chunk in response.iter_content(chunk_size=64 << 10):
                    size += len(chunk)
                    if size > cap:
                        break
                    chunks.append(chunk)
        finally:
            response.close()
        if declared > cap or size > cap:
            raise SourceError(
                self.describe(), f"the answer to qid={qid} is larger than {cap:,} bytes (max_reply_bytes)"
            )
        return b"".join(chunks)

    def _mapped(self, reply: dict) -> dict:
        """The trace fields the mapping finds in ``reply`` (a field found as null is left out)."""
        found = {name: expression.search(reply) for name, expression in self.response.items()}
        return {name: value for name, value in found.items() if value is not None}

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> HttpSutClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _shut(response: requests.Response) -> None:
    """Shut the socket a response is read from: a read blocked in another thread returns at once."""
    connection = getattr(response.raw, "connection", None) or getattr(response.raw, "_connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _cause(exc: requests.RequestException, retries: int, timeout: float) -> str:
    """A one-line cause without the request (its URL may carry a query, its headers a token)."""
    # After urllib3's retries, requests wraps the last failure: the reason of its MaxRetryError.
    reason = exc.args[0] if exc.args else exc
    reason = getattr(reason, "reason", reason)
    after = f"(after {retries} retries)"
    if isinstance(exc, requests.ReadTimeout) or isinstance(reason, ReadTimeoutError):
        return f"no answer within {timeout:g} s {after}"
    if isinstance(exc, requests.ConnectTimeout):
        return f"connection timed out after {timeout:g} s {after}"
    if isinstance(exc, requests.ConnectionError):
        # urllib3 prefixes the reason with the connection's repr; its last part is the OS error.
        return f"cannot connect {after}: {str(reason).rsplit(': ', 1)[-1]}"
    return type(exc).__name__


def _with_qid(trace: dict, qid: str, where: str) -> dict:
    """``trace`` carrying ``qid``: set when the reply has none, an error when it names another case.

    Only a reply's own ``qid`` (or what a ``response:`` mapping maps to ``qid``) is read as the case it
    answers: a service's ``id`` or ``request_id`` names its request, not the golden case, so unlike a
    stored trace's aliases it is kept as it is and never taken for the case id (the ``qid`` set here
    comes first for every reader)."""
    given = trace.get("qid")
    if given is None:
        return {**trace, "qid": qid}
    if str(given) != qid:
        raise SourceError(where, f"asked qid={qid}, answered for id={given}")
    return trace


class RecordedSutClient:
    """Answers from a recorded trace file (JSONL or a JSON array of traces, or spans: see
    :class:`RecordedSut`).

    A case is answered by its qid (any alias of the trace contract), or, for a trace without an id, by
    its exact question text; a case not in the file has no answer (None). The file is validated by the
    trace loader: a malformed file raises its InputError (file, line, id, field). Duplicates: the last
    trace wins, as in scoring. Every answer is a copy, and carries the asked qid.
    """

    def __init__(self, path: Path, spans: SpanSettings | None = None) -> None:
        self.path = Path(path)
        self._by_qid: dict[str, dict] = {}
        self._by_question: dict[str, dict] = {}
        if span_format(self.path) is not None:  # spans: their traces, grouped as the loader groups them
            records = (json.loads(line) for line in span_traces([self.path], spans or SpanSettings()).lines)
        else:
            load_traces(self.path)  # the loader's validation and its one-line errors
            records = (raw for _, raw in iter_records(self.path))
        for raw in records:
            trace = Trace.model_validate(raw)
            if trace.qid is not None:
                self._by_qid[trace.qid] = raw
            elif trace.question is not None:
                self._by_question[trace.question] = raw

    def describe(self) -> str:
        return f"recorded traces {self.path}"

    def answer(self, qid: str, question: str, reference_date: str | None = None) -> dict[str, Any] | None:
        raw = self._by_qid.get(qid)  # a recording answers as it was recorded, whatever the date
        if raw is None:
            raw = self._by_question.get(question)
            if raw is None:
                return None
            return {**copy.deepcopy(raw), "qid": qid}
        return copy.deepcopy(raw)


class PythonSutClient:
    """Answers from ``module:function``, called in this process with ``{"qid", "question",
    "reference_date"}`` (the case's id, question text and "today"; never its expected answer) and the
    SUT settings' ``options`` as keyword arguments. The function returns a mapping — a trace, or an
    object with at least ``answer`` — or None for no answer.

    A LangChain or LlamaIndex chain, wrapped::

        def ask(case):
            result = chain.invoke({"input": case["question"]})
            ids = [doc.metadata["id"] for doc in result["context"]]
            return {"answer": result["answer"], "retrieved_ids": ids}

    An exception from the function is a :class:`SourceError` naming the function and the exception's
    class and first line; it is a failed case of the replay, as an unreachable HTTP SUT is.
    """

    def __init__(self, function: str, options: Mapping[str, Any] | None = None) -> None:
        self.function = function
        self.options = dict(options or {})
        module_name, _, name = function.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InputError(function, f"cannot import {module_name}: {exc}") from None
        self._call: Callable[[dict], Any] | None = getattr(module, name, None)
        if not callable(self._call):
            raise InputError(function, f"{module_name} has no function {name}")

    def describe(self) -> str:
        return f"python {self.function}"

    def answer(self, qid: str, question: str, reference_date: str | None = None) -> dict | None:
        try:
            case = {"qid": qid, "question": question, "reference_date": reference_date}
            result = self._call(case, **self.options)
        except Exception as exc:  # the user's code: any failure is this case's failure, named
            first = (str(exc).splitlines() or [""])[0][:200]
            raise SourceError(self.describe(), f"qid={qid}: {type(exc).__name__}: {first}") from None
        if result is None:
            return None
        if not isinstance(result, Mapping):
            raise SourceError(self.describe(), f"qid={qid}: returned {type(result).__name__}, not a mapping")
        return _with_qid(dict(result), qid, self.describe())
