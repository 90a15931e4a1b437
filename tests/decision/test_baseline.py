"""Ratcheting baselines: strict regressions by direction, promotion only ever tightens, one-line errors."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine_pipeline.decision.baseline import (
    DEFAULT_MODE,
    BaselineEntry,
    BaselineError,
    Comparison,
    Regression,
    compare,
    load_baseline,
    promote,
)
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.decision.gates import LOWER_IS_BETTER
from ragspine_pipeline.errors import InputError
from ragspine_pipeline.metrics import Scope

SHARED_EXAMPLE = Path(__file__).resolve().parents[3] / "shared" / "examples" / "ragspine" / "qa_baseline.json"
NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


# --- compare ---------------------------------------------------------------------------------------


def test_equal_values_pass():
    entry = BaselineEntry({"precision": 0.8, "under_refusal": 0.05}, fabrication_count=1)
    result = compare(entry, {"precision": 0.8, "under_refusal": 0.05}, fabrication_count=1)
    assert result == Comparison([], [])
    assert result.passed


def test_strictly_below_fails_with_the_regression_record():
    result = compare(BaselineEntry({"precision": 0.8}), {"precision": 0.79996})
    assert not result.passed
    (reg,) = result.regressions
    assert (reg.metric, reg.baseline, reg.current) == ("precision", 0.8, 0.79996)
    assert reg.delta == 0.79996 - 0.8  # unrounded


def test_higher_than_baseline_passes():
    assert compare(BaselineEntry({"precision": 0.8}), {"precision": 0.9}).passed


@pytest.mark.parametrize("metric", sorted(LOWER_IS_BETTER))
def test_lower_is_better_metrics_fail_when_higher(metric):
    entry = BaselineEntry({metric: 0.05})
    assert compare(entry, {metric: 0.0}).passed
    assert compare(entry, {metric: 0.05}).passed
    result = compare(entry, {metric: 0.0501})
    assert result.regressions == [Regression(metric, 0.05, 0.0501, 0.0501 - 0.05)]


def test_under_and_over_refusal_directions():
    entry = BaselineEntry({"under_refusal": 0.02, "over_refusal": 0.10})
    assert compare(entry, {"under_refusal": 0.01, "over_refusal": 0.05}).passed
    result = compare(entry, {"under_refusal": 0.03, "over_refusal": 0.2})
    assert [r.metric for r in result.regressions] == ["under_refusal", "over_refusal"]
    assert all(r.delta > 0 for r in result.regressions)


def test_fabrication_count_up_fails_equal_or_down_passes():
    entry = BaselineEntry({}, fabrication_count=2)
    assert compare(entry, {}, fabrication_count=2).passed
    assert compare(entry, {}, fabrication_count=0).passed
    result = compare(entry, {}, fabrication_count=3)
    assert result.regressions == [Regression("fabrication_count", 2.0, 3.0, 1.0)]


def test_fabrication_count_unknown_on_either_side_is_not_checked():
    assert compare(BaselineEntry({}), {}, fabrication_count=5).passed
    result = compare(BaselineEntry({}, fabrication_count=0), {})
    assert result.passed and result.unmeasured == ["fabrication_count"]


def test_unmeasured_metrics_are_reported_not_failing():
    entry = BaselineEntry({"precision": 0.8, "faithfulness": 0.9, "chr": 0.7})
    result = compare(entry, {"precision": 0.85, "recall@k": 0.1})
    assert result.passed
    assert result.unmeasured == ["faithfulness", "chr"]


def test_only_listed_metrics_are_checked():
    assert compare(BaselineEntry({"precision": 0.8}), {"precision": 0.8, "chr": 0.0}).passed


def test_entry_none_passes():
    result = compare(None, {"precision": 0.0}, fabrication_count=99)
    assert result.passed and result.regressions == [] and result.unmeasured == []


def test_regressions_in_baseline_order_fabrication_last():
    entry = BaselineEntry({"chr": 0.9, "over_refusal": 0.1, "precision": 0.9}, fabrication_count=0)
    result = compare(entry, {"precision": 0.5, "over_refusal": 0.5, "chr": 0.5}, fabrication_count=1)
    assert [r.metric for r in result.regressions] == ["chr", "over_refusal", "precision", "fabrication_count"]


def test_nan_current_is_a_regression():
    result = compare(BaselineEntry({"precision": 0.8, "under_refusal": 0.1}), {"precision": float("nan")})
    assert [r.metric for r in result.regressions] == ["precision"]


# --- load ------------------------------------------------------------------------------------------


def test_missing_file_is_an_empty_baseline(tmp_path):
    assert load_baseline(tmp_path / "absent.json", KNOWN_METRICS) == {}


def test_missing_optional_keys_are_allowed(tmp_path):
    path = write_json(tmp_path / "b.json", {"golden": {"metrics": {"precision": 1}}})
    assert load_baseline(path, KNOWN_METRICS) == {"golden": BaselineEntry({"precision": 1.0})}


@pytest.mark.skipif(not SHARED_EXAMPLE.exists(), reason=f"shared example not present at {SHARED_EXAMPLE}")
def test_shared_example_loads_tool_and_agent():
    # A RAGSpine run has no evidence registry: its baseline's ``faithfulness`` is the narrative gate.
    baseline = load_baseline(SHARED_EXAMPLE, KNOWN_METRICS, Scope.WITHOUT_REGISTRY)
    assert set(baseline) == {"tool", "agent"}
    for entry in baseline.values():
        assert entry.fabrication_count == 0 and entry.n_cases == 41
        assert entry.updated_at is None and entry.run is None
        assert entry.metrics["answer_accuracy"] == 1.0
        assert entry.metrics["narrative_faithfulness"] == 1.0 and "faithfulness" not in entry.metrics
        assert compare(entry, entry.metrics, fabrication_count=0).passed


@pytest.mark.skipif(not SHARED_EXAMPLE.exists(), reason=f"shared example not present at {SHARED_EXAMPLE}")
def test_an_old_name_whose_metric_depends_on_the_registry_needs_to_know_the_run():
    path = SHARED_EXAMPLE
    with pytest.raises(InputError) as caught:
        load_baseline(path, KNOWN_METRICS)  # the run's evidence registry is not known
    assert str(caught.value) == (
        f"{path}: mode 'tool': 'faithfulness' is ambiguous: it means claim_faithfulness (in a golden run "
        "with an evidence registry) or narrative_faithfulness (in a golden run without an evidence "
        "registry); write the one you mean"
    )
    layered = load_baseline(path, KNOWN_METRICS, Scope.WITH_REGISTRY)["tool"]
    assert layered.metrics["claim_faithfulness"] == 1.0 and "narrative_faithfulness" not in layered.metrics


INVALID = [
    ("[1, 2]", "expected a JSON object keyed by mode, got array"),
    ('"golden"', "expected a JSON object keyed by mode, got string"),
    ("", "empty file"),
    ("{", "malformed JSON"),
    ('{"golden": []}', "mode 'golden': expected an object, got array"),
    ('{"golden": 3}', "mode 'golden': expected an object, got number"),
    ('{"golden": {}}', "mode 'golden': missing 'metrics'"),
    ('{"golden": {"metrics": [0.9]}}', "mode 'golden': 'metrics' must be an object, got array"),
    ('{"golden": {"metrics": null}}', "mode 'golden': 'metrics' must be an object, got null"),
    (
        '{"golden": {"metrics": {"precision": "0.9"}}}',
        "metric 'precision' must be a finite number, got string \"0.9\"",
    ),
    (
        '{"golden": {"metrics": {"precision": true}}}',
        "metric 'precision' must be a finite number, got true",
    ),
    ('{"golden": {"metrics": {"precision": null}}}', "metric 'precision' must be a finite number, got null"),
    ('{"golden": {"metrics": {"precision": NaN}}}', "metric 'precision' must be a finite number, got NaN"),
    ('{"golden": {"metrics": {"precision": Infinity}}}', "metric 'precision' must be a finite number"),
    ('{"golden": {"metrics": {"precision": 1e400}}}', "metric 'precision' must be a finite number"),
    ('{"golden": {"metrics": {}, "fabrication_count": -1}}', "'fabrication_count' must be a non-negative"),
    ('{"golden": {"metrics": {}, "fabrication_count": 1.5}}', "'fabrication_count' must be a non-negative"),
    ('{"golden": {"metrics": {}, "fabrication_count": "0"}}', "'fabrication_count' must be a non-negative"),
    ('{"golden": {"metrics": {}, "fabrication_count": false}}', "'fabrication_count' must be a non-negative"),
    ('{"golden": {"metrics": {}, "n_cases": -3}}', "'n_cases' must be a non-negative"),
    ('{"golden": {"metrics": {}, "updated_at": 5}}', "'updated_at' must be a string or null"),
    ('{"golden": {"metrics": {}, "run": ["a"]}}', "'run' must be a string or null"),
    ('{"golden": {"metrics": {}, "fabrication_cuont": 0}}', "unknown key 'fabrication_cuont'"),
    ('{"golden": {"metrics": {"precision": 0.9, "precision": 0.1}}}', "duplicate key 'precision'"),
    ('{"golden": {"metrics": {}}, "golden": {"metrics": {}}}', "duplicate key 'golden'"),
    (
        '{"golden": {"metrics": {"under": 0.1, "under_refusal": 0.2}}}',
        "mode 'golden': 'under' and 'under_refusal' both name the metric 'under_refusal'",
    ),
    ('{"tool": {"metrics": {"recall": 0.9, "recall@5": 0.8}}}', "mode 'tool': 'recall' and 'recall@5' both"),
    ('{"golden": {"metrics": {"fabrication": 0}}}', "mode 'golden': 'fabrication' is a count, not a metric"),
    ('{"golden": {"metrics": {"fabrication_count": 0}}}', "'fabrication_count' is a count, not a metric"),
]


@pytest.mark.parametrize(("content", "message"), INVALID)
def test_invalid_content_is_a_one_line_input_error(tmp_path, content, message):
    path = tmp_path / "b.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_baseline(path, KNOWN_METRICS)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(str(path))
    assert message in text


def test_short_names_resolve_to_their_metric(tmp_path):
    path = write_json(
        tmp_path / "b.json", {"golden": {"metrics": {"under": 0.1, " over": 0.2, "recall@5": 0.9}}}
    )
    entry = load_baseline(path, KNOWN_METRICS)["golden"]
    assert entry.metrics == {"under_refusal": 0.1, "over_refusal": 0.2, "recall@k": 0.9}
    assert not compare(entry, {"under_refusal": 0.2, "over_refusal": 0.2, "recall@k": 0.9}).passed


def test_an_unknown_metric_names_file_mode_and_name_and_lists_the_known_ones(tmp_path):
    path = write_json(tmp_path / "b.json", {"golden": {"metrics": {}}, "tool": {"metrics": {"precison": 1}}})
    with pytest.raises(InputError) as caught:
        load_baseline(path, ["precision", "under_refusal"])
    assert str(caught.value) == (
        f"{path}: mode 'tool': unknown metric 'precison' (known: precision, under_refusal; "
        "short names: under for under_refusal)"
    )


def test_promote_records_a_short_name_as_its_metric(tmp_path):
    path = write_json(tmp_path / "b.json", {"golden": {"metrics": {"under": 0.1}}})
    entry = promote(path, "golden", {"under_refusal": 0.05}, passed=True, now=NOW)
    assert entry.metrics == {"under_refusal": 0.05}
    assert json.loads(path.read_text())["golden"]["metrics"] == {"under_refusal": 0.05}


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('{\n  "golden": {\n    "metrics": {,}\n  }\n}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"b\.json:3: malformed JSON"):
        load_baseline(path, KNOWN_METRICS)


def test_not_utf8_and_directory_are_input_errors(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b'{"golden": {"metrics": {"\xff": 1}}}')
    with pytest.raises(InputError, match="not UTF-8"):
        load_baseline(path, KNOWN_METRICS)
    with pytest.raises(InputError, match="not a regular file"):
        load_baseline(tmp_path, KNOWN_METRICS)


# --- promote ---------------------------------------------------------------------------------------


def test_promote_creates_the_file(tmp_path):
    path = tmp_path / "b.json"
    entry = promote(
        path,
        DEFAULT_MODE,
        {"precision": 0.9},
        passed=True,
        fabrication_count=0,
        n_cases=41,
        run="r1",
        now=NOW,
    )
    assert entry == BaselineEntry({"precision": 0.9}, 0, 41, "2025-03-04T05:06:07Z", "r1")
    assert json.loads(path.read_text()) == {
        "golden": {
            "metrics": {"precision": 0.9},
            "fabrication_count": 0,
            "n_cases": 41,
            "updated_at": "2025-03-04T05:06:07Z",
            "run": "r1",
        }
    }
    assert path.read_text().endswith("}\n")
    assert load_baseline(path, KNOWN_METRICS) == {"golden": entry}
    # No temporary file left behind; the lock sits next to the baseline, empty, for the next update.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.json.lock", "b.json"]
    assert (tmp_path / ".b.json.lock").read_text() == ""


def test_promote_does_not_create_the_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        promote(tmp_path / "no" / "b.json", "golden", {"precision": 0.9}, passed=True, now=NOW)
    assert not (tmp_path / "no").exists()


def test_promote_tightens_and_never_loosens(tmp_path):
    path = write_json(
        tmp_path / "b.json",
        {"golden": {"metrics": {"precision": 0.8, "chr": 0.9, "under_refusal": 0.05, "over_refusal": 0.1}}},
    )
    current = {"precision": 0.85, "chr": 0.7, "under_refusal": 0.01, "over_refusal": 0.3}
    entry = promote(path, "golden", current, passed=True, now=NOW)
    assert entry.metrics == {"precision": 0.85, "chr": 0.9, "under_refusal": 0.01, "over_refusal": 0.1}


def test_promote_adds_new_metrics_and_keeps_unmeasured(tmp_path):
    path = write_json(tmp_path / "b.json", {"golden": {"metrics": {"precision": 0.8, "faithfulness": 0.95}}})
    metrics = {"precision": 0.8, "compliance": 0.99}
    entry = promote(path, "golden", metrics, passed=True, now=NOW, scope=Scope.WITH_REGISTRY)
    # The old name of a layered run's baseline is written back under its metric's current name.
    assert entry.metrics == {"precision": 0.8, "claim_faithfulness": 0.95, "compliance": 0.99}
    assert list(entry.metrics) == ["precision", "claim_faithfulness", "compliance"]  # baseline order kept
    assert json.loads(path.read_text())["golden"]["metrics"] == entry.metrics


def test_promote_fabrication_count_is_the_lower_known_count(tmp_path):
    path = tmp_path / "b.json"
    assert promote(path, "golden", {}, passed=True, fabrication_count=3, now=NOW).fabrication_count == 3
    assert promote(path, "golden", {}, passed=True, fabrication_count=5, now=NOW).fabrication_count == 3
    assert promote(path, "golden", {}, passed=True, now=NOW).fabrication_count == 3
    assert promote(path, "golden", {}, passed=True, fabrication_count=1, now=NOW).fabrication_count == 1


def test_promote_keeps_n_cases_and_run_unless_given(tmp_path):
    path = tmp_path / "b.json"
    promote(path, "golden", {}, passed=True, n_cases=41, run="r1", now=NOW)
    later = NOW + timedelta(days=1)
    entry = promote(path, "golden", {}, passed=True, now=later)
    assert (entry.n_cases, entry.run, entry.updated_at) == (41, "r1", "2025-03-05T05:06:07Z")
    entry = promote(path, "golden", {}, passed=True, n_cases=50, run="r2", now=later)
    assert (entry.n_cases, entry.run) == (50, "r2")


def test_promote_stamps_utc(tmp_path):
    plus2 = datetime(2025, 3, 4, 7, 6, 7, tzinfo=timezone(timedelta(hours=2)))
    entry = promote(tmp_path / "b.json", "golden", {}, passed=True, now=plus2)
    assert entry.updated_at == "2025-03-04T05:06:07Z"
    with pytest.raises(BaselineError):
        promote(tmp_path / "b.json", "golden", {}, passed=True, now=datetime(2025, 1, 1))
    stamp = promote(tmp_path / "b.json", "golden", {}, passed=True).updated_at
    assert stamp is not None
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").year >= 2025


def test_promote_keeps_other_modes_exactly(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(
        '{\n  "tool": {"n_cases": 41, "metrics": {"b": 1, "a": 0.5}, "fabrication_count": 0},\n'
        '  "agent": {"metrics": {"z": 1.0}}\n}',
        encoding="utf-8",
    )
    promote(path, "golden", {"precision": 0.9}, passed=True, now=NOW)
    written = json.loads(path.read_text())
    assert list(written) == ["agent", "golden", "tool"]  # sorted mode keys
    assert written["tool"] == {"n_cases": 41, "metrics": {"b": 1, "a": 0.5}, "fabrication_count": 0}
    assert list(written["tool"]) == ["n_cases", "metrics", "fabrication_count"]
    assert list(written["tool"]["metrics"]) == ["b", "a"]
    assert isinstance(written["tool"]["metrics"]["b"], int)
    assert written["agent"] == {"metrics": {"z": 1.0}}
    assert path.read_text().startswith('{\n  "agent": {\n    "metrics": {\n      "z": 1.0\n')


def test_promote_refuses_a_failing_run_leaving_the_file_byte_identical(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b'{"golden": {"metrics": {"precision": 0.5}}}')  # no indent, no newline
    before = path.read_bytes()
    with pytest.raises(InputError) as caught:
        promote(path, "golden", {"precision": 0.99}, passed=False, now=NOW)
    assert str(caught.value) == f"{path}: refusing to promote a failing run: the baseline is unchanged"
    assert path.read_bytes() == before


def test_promote_refuses_a_failing_run_without_creating_the_file(tmp_path):
    with pytest.raises(InputError, match="refusing to promote"):
        promote(tmp_path / "b.json", "golden", {"precision": 0.99}, passed=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("content", "message"), INVALID)
def test_promote_refuses_an_invalid_file_leaving_it_byte_identical(tmp_path, content, message):
    path = tmp_path / "b.json"
    path.write_text(content, encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(InputError) as caught:
        promote(path, "other", {"precision": 0.99}, passed=True, now=NOW)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.json.lock", "b.json"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"metrics": {"precision": float("nan")}},
        {"metrics": {"precision": float("inf")}},
        {"metrics": {"precision": True}},
        {"metrics": {"precision": "0.9"}},
        {"metrics": {}, "fabrication_count": -1},
        {"metrics": {}, "n_cases": 2.5},
    ],
)
def test_promote_misuse_is_a_baseline_error_and_leaves_the_file(tmp_path, kwargs):
    path = write_json(tmp_path / "b.json", {"golden": {"metrics": {"precision": 0.5}}})
    before = path.read_bytes()
    with pytest.raises(BaselineError):
        promote(path, "golden", passed=True, now=NOW, **kwargs)
    assert path.read_bytes() == before


def test_promote_writes_through_a_symlink(tmp_path):
    real = write_json(tmp_path / "real.json", {"golden": {"metrics": {"precision": 0.5}}})
    link = tmp_path / "link.json"
    link.symlink_to(real)
    promote(link, "golden", {"precision": 0.6}, passed=True, now=NOW)
    assert link.is_symlink()
    assert load_baseline(real, KNOWN_METRICS)["golden"].metrics == {"precision": 0.6}


def test_promoted_shared_example_round_trips(tmp_path):
    if not SHARED_EXAMPLE.exists():
        pytest.skip(f"shared example not present at {SHARED_EXAMPLE}")
    path = tmp_path / "b.json"
    path.write_bytes(SHARED_EXAMPLE.read_bytes())
    before = load_baseline(path, KNOWN_METRICS, Scope.WITHOUT_REGISTRY)
    metrics = dict(before["tool"].metrics, narrative_faithfulness=0.5)
    entry = promote(
        path, "tool", metrics, passed=True, fabrication_count=2, now=NOW, scope=Scope.WITHOUT_REGISTRY
    )
    assert entry.metrics == before["tool"].metrics and entry.fabrication_count == 0
    assert load_baseline(path, KNOWN_METRICS, Scope.WITHOUT_REGISTRY)["agent"] == before["agent"]


# --- property: promotion never loosens ------------------------------------------------------------

NAMES = ["precision", "chr", "compliance", "under_refusal", "over_refusal"]
UNIT = st.floats(0.0, 1.0, allow_nan=False)
METRICS = st.dictionaries(st.sampled_from(NAMES), UNIT, max_size=len(NAMES))
COUNT = st.one_of(st.none(), st.integers(0, 5))


def is_better_or_equal(metric: str, new: float, old: float) -> bool:
    return new <= old if metric in LOWER_IS_BETTER else new >= old


@settings(max_examples=300, deadline=None)
@given(
    old=st.one_of(st.none(), METRICS),
    old_count=COUNT,
    other=st.one_of(st.none(), METRICS),
    current=METRICS,
    count=COUNT,
    passed=st.booleans(),
)
def test_promote_never_loosens(old, old_count, other, current, count, passed):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "b.json"
        data: dict[str, object] = {}
        if old is not None:
            data["golden"] = {"metrics": old, "fabrication_count": old_count}
        if other is not None:
            data["tool"] = {"metrics": other}
        write_json(path, data)
        before = path.read_bytes()

        if not passed:
            with pytest.raises(InputError, match="refusing to promote"):
                promote(path, "golden", current, passed=False, fabrication_count=count, now=NOW)
            assert path.read_bytes() == before
            return

        entry = promote(path, "golden", current, passed=True, fabrication_count=count, now=NOW)
        assert load_baseline(path, KNOWN_METRICS)["golden"] == entry
        for name, value in (old or {}).items():
            new = entry.metrics[name]
            assert is_better_or_equal(name, new, value)
            if name in current:
                best = min(value, current[name]) if name in LOWER_IS_BETTER else max(value, current[name])
                assert new == best
                assert is_better_or_equal(name, new, current[name])
            else:
                assert new == value
        for name, value in current.items():
            if name not in (old or {}):
                assert entry.metrics[name] == value
        if old is not None and old_count is not None:
            assert entry.fabrication_count is not None and entry.fabrication_count <= old_count
        # against the baseline it produced, the run regresses only where the old baseline was already better
        for reg in compare(entry, current, count).regressions:
            if reg.metric == "fabrication_count":
                assert old_count is not None and count is not None and count > old_count
            else:
                assert old is not None and not is_better_or_equal(
                    reg.metric, current[reg.metric], old[reg.metric]
                )
        if other is not None:
            assert load_baseline(path, KNOWN_METRICS)["tool"] == BaselineEntry(
                {k: float(v) for k, v in other.items()}
            )
