"""The demo story as a new user runs it, through the Makefile on a fresh instance: `make run` (ships),
then `make demo-regression` (blocks); what the Dagster instance, the reports folder and the baseline
say afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from ragspine_pipeline.defs.release import DECISION_TAG, check_name
from ragspine_pipeline.reports.explorer import render_explorer

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.system,  # two make targets, each a whole-graph run on a fresh SQLite instance
    pytest.mark.skipif(
        shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "ragspine-eval").exists(),
        reason="needs make and the project's .venv (make test creates it)",
    ),
]


class DemoStory:
    """The folders of one `make run` + `make demo-regression`, and the instance they ran on."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "dagster"
        self.demo = root / "demo"
        self.reports = root / "reports"
        self.env = {
            **os.environ,
            "RAGSPINE_HOME": str(self.demo),
            "RAGSPINE_REPORTS": str(self.reports),
            "RAGSPINE_WORK": str(root / "work"),
            "RAGSPINE_ALERTS_OUTBOX": str(root / "alerts" / "outbox.jsonl"),
        }
        for name in ("VIRTUAL_ENV", "SLACK_BOT_TOKEN", "SLACK_CHANNEL", "DAGSTER_HOME"):
            self.env.pop(name, None)

    def make(self, target: str) -> subprocess.CompletedProcess:
        argv = ["make", "-s", target, f"DAGSTER_HOME={self.home}", f"DEMO={self.demo}"]
        return subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=900)

    def decision(self, run_id: str) -> dict:
        return json.loads((self.reports / "runs" / run_id / "release_decision.json").read_text())


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> tuple[DemoStory, dg.DagsterRun, dg.DagsterRun, str, str]:
    """(story, the shipping run, the blocked run, the baseline after `make run`, after the regression)."""
    story = DemoStory(tmp_path_factory.mktemp("story"))
    shipped = story.make("run")
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    story.run_output = shipped.stdout
    baseline_after_ship = (story.demo / "baseline.json").read_text()
    blocked = story.make("demo-regression")
    assert blocked.returncode == 0, blocked.stdout + blocked.stderr  # `--expect block` held
    assert "release decision: BLOCK" in blocked.stdout
    baseline_after_block = (story.demo / "baseline.json").read_text()
    with dg.DagsterInstance.from_config(str(story.home)) as instance:
        [ship_run] = instance.get_runs(dg.RunsFilter(job_name="full_eval"))
        [block_run] = instance.get_runs(dg.RunsFilter(job_name="reeval_on_index_rebuild"))
        story.check_evaluations = {
            run.run_id: [
                record.get_dagster_event().event_specific_data
                for record in instance.all_logs(
                    run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
                )
            ]
            for run in (ship_run, block_run)
        }
        story.materialized = {
            run.run_id: {
                record.get_dagster_event().asset_key.to_user_string()
                for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
            }
            for run in (ship_run, block_run)
        }
    return story, ship_run, block_run, baseline_after_ship, baseline_after_block


def test_make_run_says_what_it_is_doing_and_that_the_demos_bad_lines_are_deliberate(story):
    """Progress before each run (no minute of silence), and the demo's malformed lines named as its own,
    on purpose, in a run that ships."""
    lines = story[0].run_output.splitlines()
    scoring = [line for line in lines if line.startswith("scoring production day ")]
    earlier = [line for line in scoring if line.endswith("earlier days not scored yet)")]
    assert earlier and earlier[0].endswith(f"(1 of {len(earlier)} earlier days not scored yet)")
    assert len(scoring) == len(earlier) + 1  # then the day the run evaluates, yesterday
    evaluating = next(i for i, line in enumerate(lines) if line.startswith("evaluating: golden replay"))
    assert lines[evaluating + 1].startswith("release decision: SHIP")
    notes = [line for line in lines if "malformed" in line]
    assert notes and all("(the demo's, on purpose)" in line for line in notes)


def test_make_demo_regression_is_a_successful_run_that_blocks_and_promotes_nothing(story):
    story, ship_run, block_run, baseline_after_ship, baseline_after_block = story
    assert ship_run.status == dg.DagsterRunStatus.SUCCESS and ship_run.tags[DECISION_TAG] == "ship"
    # The release is bad, the pipeline is fine: a successful run whose verdict is its tag ...
    assert block_run.status == dg.DagsterRunStatus.SUCCESS
    assert block_run.tags[DECISION_TAG] == "block"
    decision = story.decision(block_run.run_id)
    assert decision["decision"] == "block"
    # ... whose failed gate checks are exactly the failed gates, hard ones at ERROR severity ...
    evaluations = story.check_evaluations[block_run.run_id]
    failed_checks = {e.check_name for e in evaluations if not e.passed}
    failed_gate_checks = {name for name in failed_checks if name.startswith("gate_")}
    failed_gates = [g for g in decision["gates"] if g["pass"] is False]
    assert failed_gates and failed_gate_checks == {check_name(g["metric"]) for g in failed_gates}
    severity = {e.check_name: e.severity for e in evaluations}
    for gate in failed_gates:
        expected = dg.AssetCheckSeverity.ERROR if gate["severity"] == "hard" else dg.AssetCheckSeverity.WARN
        assert severity[check_name(gate["metric"])] == expected
    verdict = {e.check_name: e.passed for e in evaluations}["release_ships"]
    assert verdict is False and severity["release_ships"] == dg.AssetCheckSeverity.ERROR
    assert {e.check_name: e.passed for e in story.check_evaluations[ship_run.run_id]}["release_ships"]
    # ... and no baseline was written: no materialisation, the file byte for byte as the ship left it.
    assert "baseline" in story.materialized[ship_run.run_id]
    assert "baseline" not in story.materialized[block_run.run_id]
    assert "release_decision" in story.materialized[block_run.run_id]
    assert baseline_after_block == baseline_after_ship
    assert json.loads(baseline_after_ship)["golden"]["run"] == ship_run.run_id


# -- the pages in a browser ----------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTHS = (1600, 390)
SCREENSHOT = ROOT / "docs" / "case-explorer.png"
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium) for the browser tests"
)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (the dev extra)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def open_page(browser, path: Path, width: int):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(path.as_uri())
    return page


def overflow(page) -> int:
    """How many pixels the page is wider than the window (0: nothing to scroll sideways)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def flips_shown(page) -> set[str]:
    """The qids the explorer lists under its current filters, every page of them."""
    page.wait_for_function("document.body.dataset.ready === '1'")
    shown: set[str] = set()
    while True:
        shown |= set(page.eval_on_selector_all(".case-row", "rows => rows.map(r => r.dataset.qid)"))
        if page.is_disabled("#page-next"):
            return shown
        page.click("#page-next")


def releasable(story: DemoStory, run_id: str) -> dict[str, float]:
    """``{qid: releasable}`` from the run's metric table."""
    table = pq.read_table(story.reports / "runs" / run_id / "metric_table.parquet").to_pylist()
    return {row["qid"]: row["value"] for row in table if row["metric"] == "releasable"}


@needs_browser
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page_name", ["ship report", "block report", "explorer"])
def test_the_reports_and_the_explorer_fit_the_window(story, browser, page_name, width):
    story, ship_run, block_run, _before, _after = story
    run, name = {
        "ship report": (ship_run, "slice_report.html"),
        "block report": (block_run, "slice_report.html"),
        "explorer": (block_run, "case_explorer.html"),
    }[page_name]
    page = open_page(browser, story.reports / "runs" / run.run_id / name, width)
    try:
        assert overflow(page) <= 0, f"{page_name} at {width} px scrolls sideways"
    finally:
        page.close()


@needs_browser
def test_the_explorer_opens_on_exactly_the_cases_that_flipped_since_the_baseline_run(story, browser):
    story, ship_run, block_run, _before, _after = story
    before, after = releasable(story, ship_run.run_id), releasable(story, block_run.run_id)
    flipped = {qid for qid in after if qid in before and before[qid] != after[qid]}
    assert flipped  # the degraded index breaks cases that passed
    page = open_page(browser, story.reports / "runs" / block_run.run_id / "case_explorer.html", 1600)
    try:
        assert page.input_value("#filter-flip") == "changed"  # it opens on the flips
        assert page.text_content("#baseline-run").strip() == ship_run.run_id
        assert flips_shown(page) == flipped
        assert int(page.text_content("#match-count")) == len(flipped)
        page.select_option("#filter-flip", "pass→fail")
        assert flips_shown(page) == {qid for qid in flipped if before[qid] == 1.0}
        page.select_option("#filter-flip", "all")
        page.fill("#search", sorted(flipped)[0].lower())
        assert sorted(flipped)[0] in flips_shown(page)
        page.fill("#search", "")
        page.select_option("#filter-flip", "changed")
        screenshot = story.root / "case-explorer.png"
        page.locator(".case-row .case-head").first.click()  # one case open, as a reader would look at it
        page.screenshot(path=str(screenshot))
        if os.environ.get("RAGSPINE_UPDATE_SCREENSHOTS") == "1":  # the README's picture
            shutil.copyfile(screenshot, SCREENSHOT)
    finally:
        page.close()


@needs_browser
def test_a_10k_case_explorer_renders_its_first_screen_in_under_two_seconds(story, browser, tmp_path):
    story, _ship_run, block_run, _before, _after = story
    document = json.loads((story.reports / "runs" / block_run.run_id / "cases.json").read_text())
    cases = document["cases"]
    document["cases"] = [
        {**case, "qid": f"{case['qid']}-{copy:04d}"}
        for copy in range(10_000 // len(cases) + 1)
        for case in cases
    ][:10_000]
    path = tmp_path / "case_explorer.html"
    path.write_text(render_explorer(document))
    page = open_page(browser, path, 1600)
    try:
        page.wait_for_function("document.body.dataset.ready === '1'")
        # From the start of navigation to the first screen, as the page's own clock measures it.
        elapsed_ms = int(page.evaluate("document.body.dataset.readyMs"))
        assert page.locator(".case-row").count() > 0
        assert elapsed_ms < 2000, f"first screen after {elapsed_ms:.0f} ms"
    finally:
        page.close()
