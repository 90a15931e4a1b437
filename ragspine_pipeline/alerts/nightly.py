"""A night of production drops as alerts: the night's alert (``drop_alert``), the part of it each
incident gets (``incident_alert``: the drops that open it, a weekly reminder that it is still below, the
recovery that closes it) and a person's acceptance of a rate's new level (``acceptance_alert``). Which
parts a night queues is ``alerts.streams``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from ragspine_pipeline.alerts.model import Acceptance, Alert, Drop, known, run_url
from ragspine_pipeline.scoring.drop_results import ReturnTest


def drop_alert(
    day: str,
    drops: Iterable[Drop],
    stream: str = "production",
    run_id: str | None = None,
    webserver_base_url: str | None = None,
    runbook: str | None = None,
    measured: Mapping[str, float | None] | None = None,
    returns: Sequence[ReturnTest] = (),
) -> Alert:
    """The night's significant production drops as one alert (a recovery when there are none);
    ``measured`` (tonight's value of each tested rate, by ``DropTest.key``) says a recovery's values,
    ``returns`` how the rates of open incidents stand against the levels they dropped from."""
    drops = list(drops)
    return Alert(
        kind="regression" if drops else "recovered",
        stream=stream,
        title=drop_title(day, drops),
        run_id=run_id,
        run_url=run_url(webserver_base_url, run_id),
        drops=drops,
        runbook=runbook if drops else None,
        # Kept on a regression too: the outbox splits a night into incidents, some of which recover.
        measured=known(measured),
        night=day,
        returns=list(returns),
    )


def drop_title(day: str, drops: Sequence[Drop]) -> str:
    """The title of a night's drops (a recovery when there are none)."""
    if not drops:
        return f"Recovered: production metrics of {day}"
    count = f"{len(drops)} significant drop{'s' if len(drops) != 1 else ''}"
    return f"Production metrics of {day}: {count}"


# What a night says of one incident: it opens, really drops after it was announced as a change of the
# traffic mix alone, is still below the level it dropped from (a weekly reminder), or closes.
IncidentPart = Literal["opens", "drops", "still", "closes"]


def incident_alert(
    night: Alert, metrics: Sequence[str], part: IncidentPart, alert_id: str, since: str | None = None
) -> Alert:
    """The part of ``night`` (a ``drop_alert``, as queued) about the incidents of ``metrics``: the drops
    that open them, one's drops of tonight when it was announced as a change of the traffic mix alone,
    the reminder that one is still below the level it dropped from since ``since`` (tonight's returns of
    its rates), or the recovery that closes one (tonight's values of its rates). Its title keeps what was
    put before the night's own title (a service's name)."""
    day = night.night or "tonight"
    drops = [] if part in ("closes", "still") else [d for d in night.drops if d.metric in metrics]
    own = drop_title(day, night.drops)
    prefix = night.title[: -len(own)] if night.title.endswith(own) else ""
    if part == "closes":
        title = f"Recovered: {', '.join(metrics)} in production metrics of {day}"
    elif part == "drops":
        title = f"Production metrics of {day}: {', '.join(metrics)} dropped, not only the traffic mix moved"
    elif part == "still":
        title = f"Production metrics of {day}: {', '.join(metrics)} still below its level of {since}"
    else:
        title = drop_title(day, drops)
    return night.model_copy(
        update={
            "id": alert_id,
            "kind": "recovered" if part == "closes" else "regression",
            "title": prefix + title,
            "drops": drops,
            "runbook": None if part in ("closes", "still") else night.runbook,
            "measured": {k: v for k, v in night.measured.items() if k.partition("@")[0] in metrics},
            "returns": [r for r in night.returns if r.metric in metrics],
            "incidents": list(metrics),
        }
    )


def acceptance_alert(
    rates: Sequence[str], by: str, reason: str, stream: str = "production", title_prefix: str = ""
) -> Alert:
    """A person's acceptance of production ``rates`` (``metric@slice``, or a whole ``metric``) at the level
    they stand at now: it closes their incidents as accepted, not recovered (``streams.observed``)."""
    acceptance = Acceptance(rates=list(rates), by=by, reason=reason)
    return Alert(
        kind="accepted",
        stream=stream,
        title=f"{title_prefix}Accepted as the new level: {', '.join(rates)} (by {by})",
        accepted=acceptance,
    )
