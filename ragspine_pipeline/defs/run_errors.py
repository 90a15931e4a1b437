"""What an alert says of a failed run's error: the root cause first, the chain of causes after it (at
most ``MAX_CHAIN`` levels, a level that only repeats the root left out), one line; the engine's error a
failure "from outside the execution context" does not carry; and an error of the instance's own database
(PostgreSQL out of reach) named as such, whatever the step or run it surfaced in."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

from ragspine_pipeline.defs.run_launcher import LOST_RUN

if TYPE_CHECKING:  # what a failure event carries (dagster exports no public name for it)
    from dagster._utils.error import SerializableErrorInfo


def engine_error(instance: dg.DagsterInstance, run_id: str) -> SerializableErrorInfo | None:
    """The last error Dagster recorded on the run outside its steps (an engine event with an error:
    "An exception was thrown during execution that is likely a framework error", a run that could not
    be launched or dequeued), which a failure event marked "from outside the execution context" does
    not carry itself."""
    for entry in reversed(instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)):
        data = entry.dagster_event.engine_event_data if entry.dagster_event else None
        if data is not None and data.error is not None:
            return data.error
    return None


INSTANCE_DATABASE = "the Dagster instance's database (PostgreSQL) could not be reached"
FAILED_FROM_OUTSIDE = "This run has been marked as failed from outside the execution context"  # Dagster's


def step_error_text(event: dg.DagsterEvent) -> str:
    data = event.step_failure_data
    description = data.user_failure_data.description if data.user_failure_data else None
    said = error_text(data.error, description)
    return f"{INSTANCE_DATABASE}: {said}" if _instance_database_error(data.error, run_level=False) else said


def run_error_text(
    event: dg.DagsterEvent | None,
    some_step_succeeded: bool = False,
    framework_error: SerializableErrorInfo | None = None,
) -> str:
    """What failed a run outside any step (its worker died, it ran past its maximum runtime, the
    instance's database went away): the run failure's error, if it carries one, else the framework
    error Dagster recorded before it, and the failure's message; "before any step" only when none
    succeeded. A database error is said as one, first."""
    data = event.job_failure_data if event is not None and event.is_job_failure else None
    error = data.error if data is not None and data.error is not None else framework_error
    cause = error_text(error) if error is not None else ""
    if cause and _instance_database_error(error, run_level=True):
        cause = f"{INSTANCE_DATABASE}: {cause}"
    message = _line(event.message or "") if event is not None else ""
    if LOST_RUN in message:  # the run monitor found its process gone: say that, not Dagster's wrapper
        return message[message.index(LOST_RUN) :].split("'")[0]
    if cause and message.startswith(FAILED_FROM_OUTSIDE):  # Dagster's default says nothing more
        message = ""
    said = "; ".join(part for part in (cause, message) if part)
    if not said:
        where = "outside any step" if some_step_succeeded else "before any step"
        return f"the run failed {where} (see the run's logs)"
    return f"the run failed outside any step: {said}"


# Dagster's PostgreSQL storage gave up (dagster_postgres), and the driver's own connection errors.
_STORAGE_ERRORS = ("DagsterPostgresException",)
_DRIVER_ERRORS = ("psycopg2.OperationalError", "psycopg2.InterfaceError", "sqlalchemy.exc.OperationalError")


def _instance_database_error(error: SerializableErrorInfo | None, run_level: bool) -> bool:
    """Whether ``error``'s chain says the instance's database could not be reached: Dagster's storage
    gave up on it, or, for a run that failed outside its steps (where only Dagster's own storage talks
    to PostgreSQL), the driver could not connect. A step's own PostgreSQL (an alert outbox) is not
    the instance's: there only Dagster's storage error counts."""
    level = error
    for _ in range(MAX_CHAIN):
        if level is None:
            return False
        if level.cls_name in _STORAGE_ERRORS:
            return True
        if run_level and any(name in level.message for name in _DRIVER_ERRORS):
            return True
        level = level.cause or level.context
    return False


MAX_CHAIN = 8  # levels of an error's cause chain the alert names
REPEAT_MIN_CHARS = 20  # a root message at least this long, found again in a level, makes it a repeat


def error_text(error: SerializableErrorInfo | None, description: str | None = None) -> str:
    """A step's error as one line: the root cause first (``Class: message``), then what it was raised
    through, outermost last (``(context: …)``), so a cut-off summary keeps the cause.

    ``description`` is a ``dg.Failure``'s one-line message (a user error): it stands for the Failure's
    own level, without the class name. Dagster's wrappers (loading an input, a retry policy that ran
    out) say what they were doing; their causes (``cause``, else the implicit ``context``) are followed
    to the end. A message that ends with a colon, as Dagster's wrappers do, loses it: the line never
    ends with one. A level whose message repeats the root cause's is left out."""
    levels: list[str] = []  # outermost first
    level = error
    while level is not None and len(levels) < MAX_CHAIN:
        message = _own_message(level)
        if description and level.cls_name == "Failure" and message == _line(description):
            levels.append(_line(description))
        else:
            name = level.cls_name or "Error"
            levels.append(f"{name}: {message}" if message else name)
        level = level.cause or level.context
    if description and _line(description) not in levels:
        levels.append(_line(description))  # a Failure whose event carries no matching error level
    if not levels:
        return "unknown error"
    root, context = levels[-1], levels[-2::-1]
    # A level that only repeats its cause's message (a driver error re-raised by SQLAlchemy, say) says
    # nothing more: dropped. A short message ("'x'") is no evidence of a repeat: kept.
    said = root.partition(": ")[2] or root
    if len(said) >= REPEAT_MIN_CHARS:
        context = [level for level in context if said not in level]
    context = list(dict.fromkeys(context))  # a wrapper re-raised by the same wrapper: said once
    return f"{root} (context: {'; '.join(context)})" if context else root


def _own_message(error: SerializableErrorInfo) -> str:
    """The error's message without the class name Dagster's serialisation puts before it
    (``botocore.exceptions.EndpointConnectionError: Could not …``), on one line."""
    message, name = _line(error.message), error.cls_name or ""
    head, sep, rest = message.partition(": ")
    if name and (head == name or head.endswith(f".{name}")):
        return rest if sep else ""
    return message


def _line(text: str) -> str:
    """``text`` on one line, without the colon a wrapper's message ends with."""
    return " ".join(text.split()).rstrip(": ").strip()
