"""One judging run: cases × metrics × judge models, cached, repeated, combined and summarised.

For every case and metric that applies (``prompts.metric_inputs``), every judge model is asked
``repeat`` times; the judgment of a model is the median of its repeats, and the ensemble's ``combined``
score the mean of the models' judgments. A case passes a metric when its score reaches the metric's
threshold (default 3). Judgments already in the cache are not asked again; identical inputs (two cases
with the same answer and context) are asked once. Every input is first cut to ``max_input_chars``
characters per field (``prompts.truncate_inputs``), the cut marked in the prompt and listed in
``JudgeRun.truncated``; the cache key is of what the judge was shown.

Faults are counted, never scored: a reply that is not the JSON the prompt asks for is retried once with
a stricter reminder, then recorded as an ``unparseable`` error for that judgment; HTTP errors, timeouts
and calls the budget did not allow are errors too. A judgment with an error has no score and is left out
of every mean and rate (the summaries and ``JudgeRun.counts`` report how many). When the budget refuses
a call, nothing more is sent and ``JudgeRun.stopped`` names the case it stopped before. If the endpoint
cannot be reached at all the run is marked ``failed`` with the reason; the caller records the judge step
as failed and goes on with the deterministic metrics. A run in which no case got a score
(``JudgeRun.nothing_judged``) has judged nothing, whatever the reason: the caller must not pass it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ragspine_pipeline.judge.cache import JudgmentCache
from ragspine_pipeline.judge.client import BudgetStop, ChatRequest, ChatResult, JudgeClient
from ragspine_pipeline.judge.prompts import (
    DEFAULT_MAX_INPUT_CHARS,
    METRICS,
    PROMPT_VERSION,
    JudgeItem,
    JudgeOutputError,
    build_messages,
    judgment_key,
    metric_inputs,
    parse_judgment,
    truncate_inputs,
)
from ragspine_pipeline.judge.stats import median_score, score_summary, self_consistency

__all__ = [
    "COMBINED",
    "DEFAULT_THRESHOLD",
    "JudgeRun",
    "JudgeSettings",
    "Judgment",
    "parse_thresholds",
    "run_judge",
]

COMBINED = "combined"
DEFAULT_THRESHOLD = 3.0


def parse_thresholds(raw: str) -> dict[str, float]:
    """``metric=score,...`` → ``{metric: score}``; ValueError naming the bad item."""
    thresholds: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or name not in METRICS:
            raise ValueError(f"threshold '{item}' is not metric=score for a metric of {', '.join(METRICS)}")
        try:
            score = float(value)
        except ValueError:
            raise ValueError(f"threshold '{item}': '{value}' is not a number") from None
        if not 1 <= score <= 5:
            raise ValueError(f"threshold '{item}': a threshold is a score from 1 to 5")
        thresholds[name] = score
    return thresholds


@dataclass(frozen=True)
class JudgeSettings:
    metrics: tuple[str, ...] = METRICS
    repeat: int = 1  # judge_repeat: the median of this many judgments per model
    thresholds: Mapping[str, float] = field(default_factory=dict)  # per metric; DEFAULT_THRESHOLD otherwise
    seed: int = 0  # of the bootstrap intervals
    temperature: float = 0.0
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS  # per prompt field; longer inputs are cut, and reported

    def threshold(self, metric: str) -> float:
        return float(self.thresholds.get(metric, DEFAULT_THRESHOLD))


@dataclass(frozen=True)
class Judgment:
    """One case × metric × model (``model`` is ``combined`` for the ensemble). ``score`` is None when
    the metric does not apply (``applicable`` False) or the judgment failed (``error`` says why)."""

    qid: str
    metric: str
    model: str
    applicable: bool
    score: float | None = None
    passed: bool | None = None
    repeats: tuple[int, ...] = ()
    reason: str | None = None
    error: str | None = None
    cached: bool = False


@dataclass
class JudgeRun:
    settings: JudgeSettings
    models: tuple[str, ...]
    judgments: list[Judgment]
    usage: dict
    cache: dict[str, int]
    failed: str | None = None
    truncated: list[dict] = field(default_factory=list)  # {qid, metric, field, chars, kept}
    stopped: str | None = None  # the budget stopped judging: which limit, before which case

    @property
    def succeeded(self) -> int:
        """Judgments that produced a score (per model; the ensemble's combined ones not counted)."""
        return sum(1 for j in self.judgments if j.model != COMBINED and j.score is not None)

    @cached_property
    def counts(self) -> dict:
        """Case × metric judgments (the ensemble's): ``applicable``, ``not_applicable``, ``scored`` (every
        model judged it), ``failed`` (applicable, no score); and ``errors``, the per-model judgments that
        failed, by kind (``error``, ``budget``, ``unparseable``, ``unreachable``)."""
        combined = [j for j in self.judgments if j.model == COMBINED]
        applicable = sum(j.applicable for j in combined)
        scored = sum(j.score is not None for j in combined)
        errors = Counter(_kind(j.error) for j in self.judgments if j.model != COMBINED and j.error)
        return {
            "applicable": applicable,
            "not_applicable": len(combined) - applicable,
            "scored": scored,
            "failed": applicable - scored,
            "errors": dict(sorted(errors.items())),
        }

    @property
    def nothing_judged(self) -> str | None:
        """Why no case got a score, or None when one did. A case's score is the ensemble's, so an
        ensemble in which no case was judged by every model has judged nothing either."""
        if self.counts["scored"]:
            return None
        if self.failed:
            return f"no judgment succeeded: {self.failed}"
        errors = [j.error for j in self.judgments if j.model != COMBINED and j.error]
        if errors:
            kinds = Counter(_kind(error) for error in errors)
            worst = ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())
            if self.succeeded:
                asked = sum(1 for j in self.judgments if j.model != COMBINED and j.applicable)
                return (
                    "no judgment succeeded: no case was judged by every model of the ensemble "
                    f"({len(errors)} of {asked} model judgments failed: {worst}; first: {errors[0]})"
                )
            return f"no judgment succeeded: all {len(errors)} failed ({worst}; first: {errors[0]})"
        return "no judgment succeeded: nothing to judge (no case has the inputs of a requested metric)"

    def scores(self, metric: str, model: str = COMBINED) -> list[float | None]:
        """Per applicable case, the score (None: an error), in case order."""
        return [j.score for j in self.judgments if j.metric == metric and j.model == model and j.applicable]

    @cached_property
    def summary(self) -> dict:
        """Per metric: every model's and the combined summary (n, excluded, mean and pass rate with
        bootstrap 95 % intervals), not-applicable count, errors by kind, repeat self-consistency."""
        out: dict = {}
        for metric in self.settings.metrics:
            rows = [j for j in self.judgments if j.metric == metric]
            threshold = self.settings.threshold(metric)
            out[metric] = {
                "threshold": threshold,
                "not_applicable": sum(1 for j in rows if not j.applicable and j.model == COMBINED),
                "models": {
                    model: score_summary(
                        self.scores(metric, model), threshold=threshold, seed=self.settings.seed
                    )
                    for model in self.models
                },
                COMBINED: score_summary(self.scores(metric), threshold=threshold, seed=self.settings.seed),
                "errors": dict(
                    sorted(Counter(_kind(j.error) for j in rows if j.error and j.model != COMBINED).items())
                ),
                "self_consistency": {
                    model: self_consistency([j.repeats for j in rows if j.model == model and j.repeats])
                    for model in self.models
                },
            }
        return out


def run_judge(
    items: Sequence[JudgeItem],
    settings: JudgeSettings,
    client: JudgeClient,
    cache: JudgmentCache | None = None,
) -> JudgeRun:
    models = tuple(client.endpoint.models)
    asks: dict[str, _Ask] = {}  # by judgment key: identical inputs are judged once
    plan: list[tuple[JudgeItem, str, dict[str, str] | None]] = []
    hits = misses = 0
    truncated: list[dict] = []
    for item in items:
        for metric in settings.metrics:
            inputs = metric_inputs(metric, item)
            if inputs is not None:
                inputs, cuts = truncate_inputs(inputs, settings.max_input_chars)
                truncated += [{"qid": item.qid, "metric": metric, **cut} for cut in cuts]
            keys = {} if inputs is None else {m: judgment_key(m, metric, inputs) for m in models}
            plan.append((item, metric, keys or None))
            for model, key in keys.items():
                if key in asks:
                    continue
                entry = cache.get(key) if cache is not None else None
                have = list(entry["scores"][: settings.repeat]) if entry else []
                reasons = list(entry["reasons"][: settings.repeat]) if entry else []
                hits, misses = hits + bool(have), misses + (not have)
                asks[key] = _Ask(model, metric, inputs, have, reasons, cached=len(have) == settings.repeat)
    failed, not_sent = _ask_all(asks, settings, client)
    stopped = _stop_reason(client.stopped, plan, not_sent)
    if cache is not None:
        for key, ask in asks.items():
            if ask.new and not ask.cached:
                cache.put(key, ask.entry())
    judgments = []
    for item, metric, keys in plan:
        judgments.extend(_judgments(item.qid, metric, keys, asks, settings, models))
    cache_counts = {"hits": hits, "misses": misses}
    return JudgeRun(settings, models, judgments, client.usage, cache_counts, failed, truncated, stopped)


@dataclass
class _Ask:
    model: str
    metric: str
    inputs: dict
    scores: list[int]
    reasons: list[str]
    cached: bool
    errors: list[str] = field(default_factory=list)
    new: int = 0

    def entry(self) -> dict:
        return {
            "model": self.model,
            "metric": self.metric,
            "prompt_version": PROMPT_VERSION,
            "scores": self.scores,
            "reasons": self.reasons,
        }


def _ask_of(asks: dict[str, _Ask], request_key: str) -> _Ask:
    """The judgment a request belongs to: request keys are ``<judgment key>#<repeat>``."""
    return asks[request_key.split("#")[0]]


def _ask_all(asks: dict[str, _Ask], settings: JudgeSettings, client: JudgeClient) -> tuple[str | None, int]:
    """Send every missing repeat; retry unparseable replies once, strictly. The reason the endpoint
    could not be reached (or None), and how many calls the budget did not let through."""

    def request(request_key: str, unreadable_reply: str | None = None) -> ChatRequest:
        ask = _ask_of(asks, request_key)
        messages = build_messages(ask.metric, ask.inputs, unreadable_reply)
        return ChatRequest(request_key, ask.model, messages, temperature=settings.temperature)

    first = [
        request(f"{key}#{r}") for key, ask in asks.items() for r in range(settings.repeat - len(ask.scores))
    ]
    results = client.complete_all(first)
    not_sent = sum(result.status == "budget" for result in results)
    unreadable = _collect(results, asks)
    if unreadable and _unreachable(asks) is None:
        retries = client.complete_all(
            [request(request_key, reply) for request_key, (reply, _) in unreadable.items()]
        )
        not_sent += sum(result.status == "budget" for result in retries)
        for request_key, (_, why) in _collect(retries, asks).items():
            _ask_of(asks, request_key).errors.append(f"unparseable judge output after a strict retry: {why}")
    else:
        for request_key, (_, why) in unreadable.items():
            _ask_of(asks, request_key).errors.append(f"unparseable judge output: {why}")
    return _unreachable(asks), not_sent


def _stop_reason(
    stop: BudgetStop | None, plan: list[tuple[JudgeItem, str, dict[str, str] | None]], not_sent: int
) -> str | None:
    """The report's sentence for a budget stop: which limit, before which case (the first one that asks
    the refused judgment), and how many calls of this run were not sent. None when none was refused."""
    if stop is None or not not_sent:
        return None
    key = stop.key.split("#")[0]
    where = next(
        (
            f"case {_case_name(item.qid)} ({metric}, {stop.model})"
            for item, metric, keys in plan
            if keys and key in keys.values()
        ),
        "the first call of this run",  # the client's budget was spent by an earlier run
    )
    if stop.limit_kind == "tokens":
        return (
            f"token budget reached before {where}: estimate {stop.estimate} > remaining {stop.left} "
            f"of {stop.limit} tokens; {not_sent} call(s) not sent"
        )
    return f"call budget reached before {where}: {stop.limit} call(s) sent; {not_sent} call(s) not sent"


def _case_name(qid: object, limit: int = 80) -> str:
    """A case id for a one-line message: on one line, at most ``limit`` characters (an id is data)."""
    text = " ".join(str(qid).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _collect(results: list[ChatResult], asks: dict[str, _Ask]) -> dict[str, tuple[str, str]]:
    """Record parsed scores and errors; the requests whose reply could not be parsed: (reply, why)."""
    unreadable: dict[str, tuple[str, str]] = {}
    for result in results:
        ask = _ask_of(asks, result.key)
        if result.status != "ok":
            ask.errors.append(f"{result.status}: {result.error}" if result.error else result.status)
            continue
        try:
            score, reason = parse_judgment(result.text)
        except JudgeOutputError as exc:
            unreadable[result.key] = ((result.text or "")[:2000], str(exc))
            continue
        ask.scores.append(score)
        ask.reasons.append(reason)
        ask.new += 1
    return unreadable


def _unreachable(asks: dict[str, _Ask]) -> str | None:
    for ask in asks.values():
        for error in ask.errors:
            if error.startswith("unreachable"):
                return error
    return None


def _kind(error: str) -> str:
    return error.split(":", 1)[0].split(" ")[0]


def _judgments(
    qid: str,
    metric: str,
    keys: dict[str, str] | None,
    asks: dict[str, _Ask],
    settings: JudgeSettings,
    models: tuple[str, ...],
) -> list[Judgment]:
    if keys is None:
        return [Judgment(qid, metric, model, False) for model in (*models, COMBINED)]
    threshold = settings.threshold(metric)
    per_model = []
    for model, key in keys.items():
        ask = asks[key]
        complete = len(ask.scores) >= settings.repeat
        score = median_score(ask.scores[: settings.repeat]) if complete else None
        error = None if complete else (ask.errors[0] if ask.errors else "not judged")
        per_model.append(
            Judgment(
                qid,
                metric,
                model,
                applicable=True,
                score=score,
                passed=None if score is None else score >= threshold,
                repeats=tuple(ask.scores[: settings.repeat]),
                reason=ask.reasons[0] if ask.reasons else None,
                error=error,
                cached=ask.cached,
            )
        )
    missing = [j.model for j in per_model if j.score is None]
    if missing:
        combined = Judgment(
            qid, metric, COMBINED, True, error=f"ensemble incomplete: no score from {', '.join(missing)}"
        )
    else:
        score = sum(j.score for j in per_model) / len(per_model)
        combined = Judgment(qid, metric, COMBINED, True, score, score >= threshold)
    return [*per_model, combined]
