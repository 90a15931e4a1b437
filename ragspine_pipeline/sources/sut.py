"""Clients of the system under test (SUT): an HTTP endpoint, or a recorded trace file.

Every client answers one golden case at a time with a raw trace dict (``contracts.trace``), or None when
it has no answer for the case (the evaluation then counts the case as missing). An answer always
carries the asked qid, so that it joins to its case.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ReadTimeoutError
from urllib3.util import Retry

from ragspine_pipeline.contracts.columns import load_traces
from ragspine_pipeline.contracts.jsonl import iter_records
from ragspine_pipeline.contracts.trace import TRACE_QID_ALIASES, Trace
from ragspine_pipeline.sources.errors import SourceError

__all__ = ["HttpSutClient", "RecordedSutClient", "SutClient"]

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


class _Retry(Retry):
    # A Retry-After of hours (urllib3 honours up to six) would stall a whole replay on one case.
    MAX_RETRY_AFTER = 60.0

    def parse_retry_after(self, retry_after: str) -> float:
        return min(super().parse_retry_after(retry_after), self.MAX_RETRY_AFTER)


class HttpSutClient:
    """A SUT behind ``POST {base_url}{path}`` with JSON ``{"qid", "question"}`` → a trace.

    Retries (429 and 5xx, connection and read errors, honouring ``Retry-After``) are urllib3's, with
    exponential backoff from ``backoff`` seconds. After them, or when the body is not a JSON object,
    :class:`SourceError` names the URL (never the headers: they may carry a token) and the cause. Safe
    to share between threads: ``requests`` pools the connections.
    """

    def __init__(
        self,
        base_url: str,
        *,
        path: str = "/answer",
        timeout: float = 10,
        max_retries: int = 3,
        backoff: float = 0.2,
        headers: dict | None = None,
    ) -> None:
        base = urlsplit(base_url)
        self.url = urlunsplit(base._replace(path=base.path.rstrip("/") + "/" + path.lstrip("/")))
        self.timeout = timeout
        self.max_retries = max_retries
        retry = _Retry(
            total=max_retries,
            backoff_factor=backoff,
            status_forcelist=RETRY_STATUSES,
            allowed_methods={"POST"},  # answering is a read: repeating it is safe
            respect_retry_after_header=True,
            raise_on_status=False,  # the last response is reported by its status, below
        )
        self._session = requests.Session()
        self._session.mount("http://", HTTPAdapter(max_retries=retry))
        self._session.mount("https://", HTTPAdapter(max_retries=retry))
        self._session.headers.update(headers or {})

    def describe(self) -> str:
        """The endpoint URL without user info, query or fragment (they may carry credentials)."""
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))

    def answer(self, qid: str, question: str, reference_date: str | None = None) -> dict:
        payload = {"qid": qid, "question": question}
        if reference_date is not None:
            payload["reference_date"] = reference_date
        try:
            response = self._session.post(self.url, json=payload, timeout=self.timeout)
        except requests.RequestException as exc:
            raise SourceError(self.describe(), _cause(exc, self.max_retries, self.timeout)) from None
        if not response.ok:
            retried = f" after {self.max_retries} retries" if response.status_code in RETRY_STATUSES else ""
            raise SourceError(self.describe(), f"HTTP {response.status_code} {response.reason}{retried}")
        try:
            trace = response.json()
        except ValueError:
            raise SourceError(self.describe(), f"the answer to qid={qid} is not JSON") from None
        if not isinstance(trace, dict):
            raise SourceError(self.describe(), f"the answer to qid={qid} is not a JSON object")
        return _with_qid(trace, qid, self.describe())

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> HttpSutClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
    """``trace`` carrying ``qid``: set when the trace has none, an error when it names another case."""
    given = next((trace[alias] for alias in TRACE_QID_ALIASES if trace.get(alias) is not None), None)
    if given is None:
        return {**trace, "qid": qid}
    if str(given) != qid:
        raise SourceError(where, f"asked qid={qid}, answered for id={given}")
    return trace


class RecordedSutClient:
    """Answers from a recorded trace file (JSONL or a JSON array of traces).

    A case is answered by its qid (any alias of the trace contract), or, for a trace without an id, by
    its exact question text; a case not in the file has no answer (None). The file is validated by the
    trace loader: a malformed file raises its InputError (file, line, id, field). Duplicates: the last
    trace wins, as in scoring. Every answer is a copy, and carries the asked qid.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        load_traces(self.path)  # the loader's validation and its one-line errors
        self._by_qid: dict[str, dict] = {}
        self._by_question: dict[str, dict] = {}
        for _, raw in iter_records(self.path):
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
