"""What the Dagster UI shows is plain Markdown and stands on its own.

Dagster renders an asset's, op's or resource's docstring (and every `description=`) as Markdown, whole.
reStructuredText roles and double backquotes show up raw there, and a reference to a document users do
not have helps nobody: every description of the code location is checked for both.
"""

from __future__ import annotations

import re

import pytest

from ragspine_pipeline.definitions import defs

NOT_MARKDOWN = re.compile(r"``|:(?:func|class|meth|mod|data|attr|obj|exc):`")
INTERNAL_REFERENCE = re.compile(r"\bSPEC\b")


def problems(description: str | None) -> list[str]:
    """What is wrong with one description (empty: nothing)."""
    text = description or ""
    found = [f"reStructuredText {match!r}" for match in NOT_MARKDOWN.findall(text)]
    if INTERNAL_REFERENCE.search(text):
        found.append("cites SPEC")
    return found


def ui_descriptions() -> dict[str, str | None]:
    """Every description the UI shows: assets, asset checks, jobs and their ops, sensors, schedules,
    resources."""
    repository = defs.get_repository_def()
    graph = defs.resolve_asset_graph()
    out: dict[str, str | None] = {}
    for node in graph.asset_nodes:
        out[f"asset {node.key.to_user_string()}"] = node.description
    for key in graph.asset_check_keys:
        out[f"check {key.asset_key.to_user_string()}:{key.name}"] = graph.get_check_spec(key).description
    for job in repository.get_all_jobs():
        out[f"job {job.name}"] = job.description
        for op in job.graph.iterate_node_defs():
            out[f"op {job.name}.{op.name}"] = op.description
    for sensor in repository.sensor_defs:
        out[f"sensor {sensor.name}"] = sensor.description
    for schedule in repository.schedule_defs:
        out[f"schedule {schedule.name}"] = schedule.description
    for name, resource in repository.get_top_level_resources().items():
        out[f"resource {name}"] = resource.description
    return out


def test_the_walk_sees_every_kind_of_definition():
    kinds = {name.split(" ", 1)[0] for name in ui_descriptions()}
    assert kinds == {"asset", "check", "job", "op", "sensor", "schedule", "resource"}


def test_every_ui_description_is_plain_markdown_without_internal_references():
    bad = {name: found for name, text in ui_descriptions().items() if (found := problems(text))}
    assert bad == {}


@pytest.mark.parametrize(
    "text",
    ["Writes ``slice_report.md``.", "See :func:`metric_rows`.", "A :class:`Gate`.", "As SPEC §4 says."],
)
def test_the_checker_catches_rst_and_spec(text):
    assert problems(text)


def test_the_checker_accepts_markdown():
    assert problems("Writes `slice_report.md` (see docs/metrics.md); **ship** or *block*.") == []
