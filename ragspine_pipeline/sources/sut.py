"""The settings that declare the system under test (SUT), and open its client (``sources.sut_clients``).

A SUT answers one golden case at a time with a raw trace dict (``contracts.trace``), or None when it has
no answer for the case (the evaluation then counts the case as missing). An answer always carries the
asked qid, so that it joins to its case. Three kinds, each declared by a settings model (in the
component's YAML, or a ``--sut`` file on the command line):

* ``http`` (:class:`HttpSut`): any method and URL, headers whose values may name environment variables
  (``Authorization: Bearer ${SUPPORT_BOT_TOKEN}``: expanded when the client opens, never stored, shown or
  logged), a request body template, and a mapping from the service's JSON reply to trace fields (JMESPath
  expressions); timeout, retries, concurrency and a requests-per-second cap.
* ``python`` (:class:`PythonSut`): ``module:function`` called in process with ``{qid, question,
  reference_date}``, returning a mapping (a trace) or None.
* ``recorded`` (:class:`RecordedSut`): a file of traces recorded earlier.

Each kind has an :meth:`identity`: what its answers depend on, the key of the answer store
(``sources.answer_store``) with the index version and the ``release`` every kind may name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import jmespath
import jmespath.exceptions
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragspine_pipeline import inputs
from ragspine_pipeline.contracts.spans import SpanSettings
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.sources.sut_clients import (
    DEFAULT_BODY,
    DEFAULT_MAX_REPLY_BYTES,
    HttpSutClient,
    PythonSutClient,
    RateLimit,
    RecordedSutClient,
    SutClient,
    render_body,
)

__all__ = [
    "HttpSut",
    "HttpSutClient",
    "PythonSut",
    "PythonSutClient",
    "RateLimit",
    "RecordedSut",
    "RecordedSutClient",
    "SutClient",
    "SutSettings",
    "load_sut_settings",
    "render_body",
]

# -- the settings -----------------------------------------------------------------------------------

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str | None = Field(
        default=None,
        description="which release of the service answers: its version, image tag or commit; ${NAME} is "
        'the environment variable NAME (`release: "${GIT_COMMIT}"`). Stored answers are reused only for '
        "the same release (`ragspine-eval replay --release` overrides it)",
    )

    def release_identity(self, env: Mapping[str, str] = os.environ) -> str | None:
        """The release with its ``${NAME}`` variables expanded; None when none is set. An unset variable
        or an empty release is a one-line InputError."""
        return None if self.release is None else expand_release(self.release, env)


# Not part of a SUT's identity: how it is asked (time-outs, retries, pace) never changes what it
# answers, and the release is a key of the answer store of its own.
OUTSIDE_IDENTITY = frozenset({"timeout_s", "retries", "concurrency", "max_rps", "release", "max_reply_bytes"})
MAX_REPLY_CAP = 7 << 20


class HttpSut(_Settings):
    """A RAG service over HTTP."""

    kind: Literal["http"] = "http"
    url: str = Field(description="the whole URL the question is sent to, path included")
    method: Literal["POST", "PUT", "GET"] = "POST"
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="request headers; ${NAME} in a value is the environment variable NAME, read when the "
        "replay starts and never stored or shown",
    )
    body: dict[str, Any] = Field(
        default_factory=lambda: dict(DEFAULT_BODY),
        description="the JSON body (GET: the query parameters); in any string, {qid}, {question} and "
        "{reference_date} are the case's; a string that is just one of them takes its value as is, and a "
        "field that is just {reference_date} is left out for a case without one; everything else is "
        "sent as written",
    )
    response: dict[str, str] | None = Field(
        default=None,
        description="trace field -> JMESPath expression over the reply; a field the expression finds "
        "nothing for is left out. None: the reply is the trace",
    )
    timeout_s: float = Field(default=10.0, gt=0, le=86400, allow_inf_nan=False)
    retries: int = Field(default=3, ge=0, description="retries of a 429/5xx or a dropped connection")
    max_reply_bytes: int = Field(
        default=DEFAULT_MAX_REPLY_BYTES,
        ge=1024,
        le=MAX_REPLY_CAP,
        description="the largest reply kept; a larger one fails its case, never stored",
    )
    concurrency: int = Field(default=8, ge=1, le=256, description="questions in flight")
    max_rps: float | None = Field(
        default=None, gt=0, description="at most this many questions a second (their retries aside)"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url

    @field_validator("response")
    @classmethod
    def _expressions(cls, response: dict[str, str] | None) -> dict[str, str] | None:
        for name, expression in (response or {}).items():
            try:
                jmespath.compile(expression)
            except jmespath.exceptions.JMESPathError as exc:
                raise ValueError(f"response.{name}: not a JMESPath expression ({exc.msg})") from None
        return response

    def identity(self) -> str:
        """What the answers depend on: URL, method, body, reply mapping and the headers *as written*
        (names case-folded). A header's ``${NAME}`` stays unexpanded, so a rotated token is the same
        service while ``X-Model: a`` → ``b`` is another; the secret itself is never read here."""
        headers = {name.lower(): value for name, value in self.headers.items()}
        return _identity({**self.model_dump(exclude={*OUTSIDE_IDENTITY, "headers"}), "headers": headers})

    def client(self, env: Mapping[str, str] = os.environ) -> HttpSutClient:
        return HttpSutClient(
            self.url,
            path="",
            method=self.method,
            headers=expand_headers(self.headers, env),
            body=self.body,
            response=self.response,
            timeout=self.timeout_s,
            max_retries=self.retries,
            max_rps=self.max_rps,
            concurrency=self.concurrency,
            max_reply_bytes=self.max_reply_bytes,
        )


class PythonSut(_Settings):
    """A function of yours, called in this process: a LangChain or LlamaIndex chain wrapped in three lines."""

    kind: Literal["python"] = "python"
    function: str = Field(description="module:function, importable where the replay runs")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments the function is called with beside the case (a model name, an "
        "index path); part of the SUT's identity",
    )
    concurrency: int = Field(default=1, ge=1, le=256, description="calls in flight (threads)")

    @field_validator("function")
    @classmethod
    def _target(cls, function: str) -> str:
        module, _, name = function.partition(":")
        if not module or not name.isidentifier():
            raise ValueError(f"not module:function: {function!r}")
        return function

    def identity(self) -> str:
        """``module:function``: what the function's code does is the release's to name."""
        return _identity(self.model_dump(exclude=OUTSIDE_IDENTITY))

    def client(self, env: Mapping[str, str] = os.environ) -> PythonSutClient:
        return PythonSutClient(self.function, self.options)


class RecordedSut(_Settings):
    """Traces recorded earlier (JSONL or a JSON array), or the OpenTelemetry spans of a golden run
    through a traced service (OTLP/JSON or Phoenix's span table: ``contracts.spans``), read with the span
    settings given here."""

    kind: Literal["recorded"] = "recorded"
    path: str
    concurrency: int = 1
    citation_pattern: str | None = None
    citation_attribute: str | None = None
    version_attribute: str = "service.version"
    case_id_attribute: str | None = None

    def spans(self) -> SpanSettings:
        try:
            return SpanSettings.of(self)
        except ValueError as exc:
            raise InputError(self.path, str(exc)) from None

    def identity(self) -> str:
        """The recording's content (sha256), not its path: a file replaced at the same path is
        another SUT. An unreadable file is a one-line InputError."""
        try:
            with open(self.path, "rb") as recording:
                content = hashlib.file_digest(recording, "sha256").hexdigest()
        except OSError as exc:
            raise InputError(self.path, f"cannot read the recorded traces: {exc.strerror or exc}") from None
        spans = self.model_dump(include={"citation_pattern", "citation_attribute", "case_id_attribute"})
        return _identity({"kind": self.kind, "sha256": content, **{k: v for k, v in spans.items() if v}})

    def client(self, env: Mapping[str, str] = os.environ) -> RecordedSutClient:
        return RecordedSutClient(Path(self.path), self.spans())


SutSettings = Annotated[HttpSut | PythonSut | RecordedSut, Field(discriminator="kind")]


def load_sut_settings(path: str | Path) -> HttpSut | PythonSut | RecordedSut:
    """A ``--sut`` file (YAML or JSON) declaring one SUT; a malformed one is a one-line InputError."""
    from pydantic import TypeAdapter, ValidationError

    # A regular file only (a FIFO is refused, never waited on), capped; YAML behind the caps, a key
    # given twice refused (never the last one silently).
    raw = inputs.load_yaml(inputs.read_text(path, "SUT settings"), str(path), inputs.StrictLoader)
    try:
        return TypeAdapter(SutSettings).validate_python(raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or None
        raise InputError(str(path), error["msg"], field=field) from None


def expand_headers(headers: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Each header value with ``${NAME}`` replaced by the environment variable; an unset one is a
    one-line InputError naming the header and the variable (never a value)."""
    return {
        header: _expanded(text, env, "SUT headers", f"header {header!r}") for header, text in headers.items()
    }


def expand_release(text: str, env: Mapping[str, str], where: str = "SUT settings") -> str:
    """A release with ``${NAME}`` replaced by the environment variable, as headers are: an unset one,
    or a release that comes out empty, is a one-line InputError (an unnamed release would share its
    stored answers with every other)."""
    release = _expanded(text, env, where, f"release {text!r}").strip()
    if not release:
        raise InputError(where, f"release {text!r} is empty: name the release (its version, tag or commit)")
    return release


def _expanded(text: str, env: Mapping[str, str], where: str, what: str) -> str:
    def variable(match: re.Match) -> str:
        name = match.group(1)
        if name not in env:
            raise InputError(where, f"{what} needs the environment variable {name}")
        return env[name]

    return ENV_REFERENCE.sub(variable, text)


def _identity(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
