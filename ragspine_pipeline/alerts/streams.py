"""The memory of each alert stream: what it last announced, and on a stream of production drops its open
incidents — which alert is news, and what an incident's night says.

A stream of production drops has one **incident** per metric. It opens the night the metric first
alerts (one top-level message for every metric opening that night), and each of its rates keeps the
level it dropped from (``FrozenLevel``: the trailing level of the test that alerted), held fixed however
the trailing nights move. Every later night, each rate of an open incident is tested against that level
(``scoring.significance``: the night's ``returns``). The incident:

* **spreads, quietly**, when the metric alerts in a rate it did not hold yet (another slice, the rate at
  the usual traffic mix): the rate joins with its own level, and the next reminder lists it — except
  that an incident announced as a change of the traffic mix alone (``Drop.mix_alone``) says so in a
  reply the first night one of its rates really drops (``drops``: the rate at the usual mix fell, or a
  slice did), since nothing it said yet was a drop;
* **stays open, quietly**, while it is not back — whatever tonight's tests against the trailing nights
  say (they learn a lasting drop within weeks): at most one short "still below" reply in its thread a
  week (``REMINDER_DAYS``), listing every rate against its level;
* **closes as recovered** (:func:`recovered`) when its all-traffic rates (every rate, for an incident of
  slices alone) are back within the noise of their levels over their last nights (two by default,
  ``recovery_nights``; more for a rate whose drop two nights cannot tell apart) and none of its slices
  is still clearly below its own: a reply naming what recovered;
* **closes as accepted** when a person accepts the rates' new level (``ragspine-eval incidents
  accept``, recorded who, when and why): a reply saying so; from then on those rates are compared only
  with the nights since they dropped (``accepted``).

A rate with no traffic on a night is not judged that night (its incident stays open until it has, or is
accepted). An incident written before incidents kept their levels takes them from its next alerting
night, and closes the old way (the first night its metric does not alert) until it has them.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Literal

from pydantic import BaseModel

from ragspine_pipeline.alerts.model import MODEL_CONFIG, Alert, Drop
from ragspine_pipeline.alerts.nightly import IncidentPart, incident_alert
from ragspine_pipeline.scoring.drop_results import FrozenLevel, ReturnTest

REMINDER_DAYS = 7  # at most one "still below" reply in an open incident's thread in this many days


class Incident(BaseModel):
    """One open incident of a stream of production drops (one metric): the failure keys that alerted on
    the last night that said anything about it, that night, the night it opened, each rate's frozen
    level, and the last night it was judged."""

    model_config = MODEL_CONFIG

    failures: list[str] = []
    night: str | None = None  # the last night a message said anything of it
    opened: str | None = None
    levels: dict[str, FrozenLevel] = {}  # metric@slice -> the level it dropped from
    judged: str | None = None  # the last night its rates were judged (the same night again adds nothing)
    mix_alone: bool = False  # announced as a change of the traffic mix alone: no drop said yet


class Accepted(BaseModel):
    """A rate whose new level a person accepted: its level is that of the nights since ``since``."""

    model_config = MODEL_CONFIG

    since: str
    by: str
    reason: str
    at: str


ATTEMPT = "attempt:"  # a failed run's key among its stream's failures (``Alert.failure_keys``)


class StreamState(BaseModel):
    """The last announced condition of one stream; on a stream of production drops, its open incidents
    by metric and the rates whose new level was accepted."""

    model_config = MODEL_CONFIG

    status: Literal["failing", "ok"]
    failures: list[str] = []
    index_version: str | None = None
    alert_id: str | None = None
    updated_at: str
    incidents: dict[str, Incident] = {}
    accepted: dict[str, Accepted] = {}

    def open_levels(self) -> dict[str, FrozenLevel]:
        """Every rate of the open incidents with the level it dropped from (``metric@slice`` →)."""
        return {key: level for incident in self.incidents.values() for key, level in incident.levels.items()}

    def accepted_since(self) -> dict[str, str]:
        """Every rate whose new level was accepted, with the night that level started (``metric@slice`` →)."""
        return {key: accepted.since for key, accepted in self.accepted.items()}


def is_news(previous: StreamState | None, alert: Alert) -> bool:
    """Whether ``alert`` says something its stream has not said yet.

    A regression is news unless the stream is already failing on the same index version with no
    failure that was not announced then; a recovery is news only right after a failure; a run
    failure is news once per attempt (a run's stream holds its retries, each failure keyed by its run
    id); a notice is news once (one stream per thing it tells).
    """
    if alert.kind == "notice":
        return previous is None
    if alert.kind == "run_failure":  # once per attempt, ever: a failure told late after its retry too
        return previous is None or not set(alert.failure_keys) <= set(previous.failures)
    if alert.kind == "recovered":
        return previous is not None and previous.status == "failing"
    if previous is None or previous.status != "failing":
        return True
    if alert.index_version != previous.index_version:
        return True
    return bool(set(alert.failure_keys) - set(previous.failures))


def observed(previous: StreamState | None, alert: Alert) -> tuple[list[Alert], StreamState]:
    """What of ``alert`` is news for its stream — the alerts to queue, in order — and the stream's
    state after it.

    A night's production drops (an alert with drops, or any alert on a stream with open incidents) are
    news per incident (:func:`incident_news`); an acceptance closes what it accepts
    (:func:`acceptance_news`). Any other alert is news or not as a whole (:func:`is_news`); its state
    moves either way: a shrinking set of failures is remembered, so a failure that comes back later is
    news again.
    """
    if alert.kind == "accepted":
        return acceptance_news(previous, alert)
    if alert.drops or (previous is not None and previous.incidents):
        return incident_news(previous, alert)
    news = is_news(previous, alert)
    if alert.kind == "notice":
        return [alert] if news else [], previous or StreamState(
            status="ok", alert_id=alert.id, updated_at=now()
        )
    kept = {"accepted": previous.accepted} if previous is not None else {}
    # The attempts of a run that were said to fail stay said, recovered or not (a run's stream).
    attempts = [key for key in (previous.failures if previous else []) if key.startswith(ATTEMPT)]
    if alert.kind == "recovered":
        return [alert] if news else [], StreamState(
            status="ok", failures=attempts, alert_id=alert.id if news else None, updated_at=now(), **kept
        )
    if alert.kind == "run_failure" and not news:  # an attempt said already: the stream stays as it is
        return [], previous
    return [alert] if news else [], StreamState(
        status="failing",
        failures=sorted({*alert.failure_keys, *attempts}),
        index_version=alert.index_version,
        alert_id=alert.id if news or previous is None else previous.alert_id,
        updated_at=now(),
        **kept,
    )


def incident_news(previous: StreamState | None, night: Alert) -> tuple[list[Alert], StreamState]:
    """The incidents one night of production drops opens, spreads, reminds of and closes (module
    docstring), as the alerts to queue — the opening drops together in one top-level message
    (``night.id``), a reminder or a recovery a reply in its incident's thread — and the stream's state
    after it."""
    day = night.night
    drops: dict[str, list[Drop]] = {}
    for drop in night.drops:
        drops.setdefault(drop.metric, []).append(drop)
    returns = {r.key: r for r in night.returns}
    incidents = dict(previous.incidents) if previous is not None else {}
    parts: list[tuple[IncidentPart, list[str], str | None]] = []
    opened = [metric for metric in drops if metric not in incidents]
    if opened:
        parts.append(("opens", opened, None))
    for metric in opened:
        incidents[metric] = Incident(
            failures=sorted(d.key for d in drops[metric]),
            night=day,
            opened=day,
            levels=_levels(drops[metric], day),
            judged=day,
            mix_alone=all(d.mix_alone for d in drops[metric]),
        )
    for metric, incident in list(incidents.items()):
        if metric in opened or (day is not None and incident.judged == day):
            continue  # opened tonight, or the same night evaluated again: nothing new
        tonight = drops.get(metric, [])
        if not incident.levels and not tonight:  # from before levels were kept: closes the old way
            parts.append(("closes", [metric], None))
            del incidents[metric]
            continue
        spread = [d for d in tonight if d.name not in incident.levels]
        levels = {**incident.levels, **_levels(spread, day)}  # more of its rates join, quietly
        said, mix_alone = incident.night, incident.mix_alone
        if mix_alone and any(not d.mix_alone for d in tonight):  # a mix change is now a real drop too
            parts.append(("drops", [metric], None))
            said, mix_alone = day, False
        elif not spread and recovered(incident.levels, returns):
            parts.append(("closes", [metric], None))
            del incidents[metric]
            continue
        elif _days(said, day) >= REMINDER_DAYS:
            parts.append(("still", [metric], incident.opened))
            said = day
        failures = sorted({*incident.failures, *(d.key for d in tonight)})
        incidents[metric] = incident.model_copy(
            update={
                "failures": failures,
                "night": said,
                "levels": levels,
                "judged": day,
                "mix_alone": mix_alone,
            }
        )
    queued = [
        incident_alert(night, metrics, part, night.id if i == 0 else f"{night.id[:120]}.{i}", since)
        for i, (part, metrics, since) in enumerate(parts)
    ]
    return queued, _state(previous, queued, incidents, previous.accepted if previous is not None else {})


def acceptance_news(previous: StreamState | None, alert: Alert) -> tuple[list[Alert], StreamState]:
    """A person accepted the new level of ``alert.accepted.rates`` (``metric@slice``, or every rate of a
    metric's incident): those rates leave their incidents (an incident left without rates closes) and are
    compared from then on with the nights since they dropped. One reply in each incident's thread says
    who accepted what and why. Rates of no open incident are ignored (the command checks first)."""
    acceptance = alert.accepted
    incidents = dict(previous.incidents) if previous is not None else {}
    accepted = dict(previous.accepted) if previous is not None else {}
    queued = []
    for metric, incident in list(incidents.items()):
        keys = [
            key for key in incident.levels if key in acceptance.rates or metric in acceptance.rates
        ]  # fmt: skip
        if not keys and metric not in acceptance.rates:
            continue
        for key in keys:
            accepted[key] = Accepted(
                since=incident.levels[key].since, by=acceptance.by, reason=acceptance.reason, at=acceptance.at
            )
        levels = {key: level for key, level in incident.levels.items() if key not in keys}
        if levels:
            failures = [f for f in incident.failures if f.removeprefix("drop:") in levels]
            incidents[metric] = incident.model_copy(update={"levels": levels, "failures": failures})
        else:
            del incidents[metric]
        rates = ", ".join(keys) or metric
        queued.append(
            alert.model_copy(
                update={
                    "id": f"{alert.id[:120]}.{len(queued)}" if queued else alert.id,
                    "title": alert.title.replace(", ".join(acceptance.rates), rates, 1),
                    "incidents": [metric],
                    "accepted": acceptance.model_copy(update={"closes": metric not in incidents}),
                }
            )
        )
    return queued, _state(previous, queued, incidents, accepted)


def incident_rows(state: StreamState | None, night: Alert | None = None) -> list[dict]:
    """One row per rate of the open incidents of ``state`` (metric by metric, then rate by rate): the
    night its incident opened, the level it dropped from (``level``, in the metric's own direction), its
    value on ``night`` (a ``drop_alert``: its return test, else its drop) and whether it is back at its
    level there; then each rate whose new level was accepted."""
    if state is None:
        return []
    returns = {r.key: r for r in night.returns} if night is not None else {}
    tonight = {key: r.current for key, r in returns.items()}
    tonight |= {d.name: d.current for d in night.drops} if night is not None else {}
    rows = [
        {
            "metric": metric,
            "rate": key,
            "opened": incident.opened,
            "level": level.trailing,
            "tonight": tonight.get(key),
            "status": "open, back" if key in returns and returns[key].back else "open",
        }
        for metric, incident in sorted(state.incidents.items())
        for key, level in sorted(incident.levels.items())
    ]
    rows += [
        {"metric": key.partition("@")[0], "rate": key, "opened": accepted.since, "level": None,
         "tonight": tonight.get(key),
         "status": f"accepted by {accepted.by} on {accepted.at[:10]}: {accepted.reason}"}
        for key, accepted in sorted(state.accepted.items())
    ]  # fmt: skip
    return rows


def recovered(levels: dict[str, FrozenLevel], returns: dict[str, ReturnTest]) -> bool:
    """Is an incident with these rates back? Its all-traffic rates (or, without one, every rate) are
    back at their levels tonight, and none of its slices is still clearly below its own (one-sided 1 %
    for its slices together, ``ReturnTest.below_among``): a slice is a small sample, and confirming
    each back would take a week of nights; a slice still well down when all traffic is back would
    still show."""
    if not levels:
        return False
    overall = [key for key, level in levels.items() if level.overall] or list(levels)
    rest = [key for key in levels if key not in overall]
    confirmed = all(key in returns and returns[key].back for key in overall)
    return confirmed and not any(key in returns and returns[key].below_among(len(rest)) for key in rest)


def _state(
    previous: StreamState | None,
    queued: list[Alert],
    incidents: dict[str, Incident],
    accepted: dict[str, Accepted],
) -> StreamState:
    """A production stream's state after a night or an acceptance queued ``queued``."""
    return StreamState(
        status="failing" if incidents else "ok",
        failures=sorted(key for incident in incidents.values() for key in incident.failures),
        alert_id=queued[0].id if queued else previous.alert_id if previous is not None else None,
        updated_at=now(),
        incidents=incidents,
        accepted=accepted,
    )


def _levels(drops: list[Drop], night: str | None) -> dict[str, FrozenLevel]:
    """The levels ``drops`` dropped from, frozen on ``night`` (drops of older alerts keep none)."""
    frozen = {d.name: d.frozen(night or "") for d in drops}
    return {key: level for key, level in frozen.items() if level is not None}


def _days(first: str | None, last: str | None) -> int:
    """Days from night ``first`` to night ``last`` (0 when either is unknown)."""
    if not first or not last:
        return 0
    return (date.fromisoformat(last) - date.fromisoformat(first)).days


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
