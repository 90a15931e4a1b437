"""docs/your-service.md, followed literally: every `sh` block of the page run in order in one shell
(the installs aside: the package is installed already, and the `init`-ed project is put on PYTHONPATH
as its `pip install -e .` would), against a stand-in for the reader's service on loopback that checks
the bearer token and replies as RAGSpine's own server does (an answer text, sources as objects, a
request id of its own, no retrieved ids).

The command-line part must ship a release, and a second release that got worse, its release step run
again in the same project with the answers folder kept, must be asked every question and be blocked by
the baseline the first one promoted. The Dagster part (a system test) runs the component under a real
`dagster-daemon`: the run it launches ships; the service made worse, the same launch blocks, naming
the broken case; Slack (a loopback stand-in) gets exactly one message, the block's."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import load_factor
from tests.fake_rag_service import FakeRagService

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "your-service.md"
SERVICE_URL = "https://support-bot.internal/v1/answer"
TEMPLATE_GOLD = ROOT / "ragspine_pipeline" / "project_template" / "golden" / "gold.jsonl"
DAGSTER_SECTION = "## 7."


def shell_blocks(dagster: bool = False) -> list[str]:
    """The page's `sh` blocks in order: those before its Dagster section, or (``dagster``) every one."""
    text = DOC.read_text(encoding="utf-8")
    if not dagster:
        text = text[: text.index(DAGSTER_SECTION)]
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def block(containing: str) -> str:
    [found] = [b for b in shell_blocks(dagster=True) if containing in b]
    return found


def answers(worse: bool = False) -> dict[str, dict]:
    """What a good support bot answers to the template's cases (``worse``: one answer lost its citation)."""
    traces = {}
    for line in TEMPLATE_GOLD.read_text().splitlines():
        case = json.loads(line.replace("{{SERVICE_PREFIX}}", "SUPPORT-BOT"))
        if case["answerable"]:
            claim = f"As the policy says, {case['gold_claim_substr'][0]}."
            cited = case["gold_citations"]
            answer = {"claim": claim, "citations": [] if worse and not traces else cited}
            traces[case["qid"]] = {"answer_json": answer, "retrieved_ids": [*cited, "other#1"]}
        else:
            traces[case["qid"]] = {"answer_json": {"claim": "I'm sorry, I don't know.", "citations": []}}
    return traces


def script(blocks: list[str], service: FakeRagService, strict: bool = True) -> str:
    return ("set -eu\n" if strict else "set -u\n") + "\n".join(
        line.replace(SERVICE_URL, service.url)
        for text in blocks
        for line in text.splitlines()
        if not line.startswith("pip install")
    )


def run(text: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", text], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def token() -> str:
    return re.search(r"export SUPPORT_BOT_TOKEN=(\S+)", DOC.read_text()).group(1)


@pytest.mark.system  # the page's commands, each a subprocess
def test_the_page_followed_literally_ships_a_good_release_and_blocks_a_worse_one(tmp_path):
    assert len(shell_blocks()) >= 4
    with FakeRagService(answers(), token=token(), path="/v1/answer", shape="sources") as service:
        first = run(script(shell_blocks(), service), tmp_path)
        assert first.returncode == 0, first.stdout + first.stderr
        project = tmp_path / "support-bot"
        decision = json.loads((project / "decision.json").read_text())
        assert decision["release"]["decision"] == "ship" and decision["under_refusal"] == 0.0
        # The citations are the sources it used: chr is measured on them, recall@k says why it is not.
        assert decision["chr"] == 1.0 and decision["recall@k"] is None
        assert "citations_are_retrieved" in decision["unmeasured"]["recall@k"]
        assert json.loads((project / "baseline.json").read_text())  # promoted
        assert service.unauthorised == 0 and token() not in first.stdout + first.stderr
        assert "  under_refusal = 0 over 2" in first.stdout  # check-traces read the configured refusals
        assert sum(service.asked.values()) == 5

        # The next release is deployed at the same address, worse on one case: the page's release
        # step again, in the same project, its .answers kept, under the new release's name.
        service.traces = answers(worse=True)
        service.asked.clear()
        release, named = re.subn(
            r"(export SUPPORT_BOT_RELEASE=)\S+", r"\g<1>2026.11.2", block("ragspine-eval replay")
        )
        assert named == 1 and (project / ".answers").is_dir()
        second = run(script([release], service, strict=False) + "\necho exit=$?", project)
    assert second.stdout.rstrip().endswith("exit=1"), second.stdout + second.stderr
    assert sum(service.asked.values()) == 5  # every question asked of the new release
    decision = json.loads((project / "decision.json").read_text())
    blocked = decision["release"]
    assert blocked["decision"] == "block" and blocked["regressions"]
    assert not [warning for warning in decision["warnings"] if "reused" in warning]


@pytest.mark.system  # a real dagster-daemon starting real runs
def test_the_dagster_part_runs_the_component_under_the_daemon_and_slack_hears_the_block(tmp_path, fake_slack):
    slack = {"SLACK_API_BASE_URL": fake_slack.url}  # the network edge: where the reader's Slack would be
    project = tmp_path / "support-bot"
    env = {**slack, "PYTHONPATH": str(project)}  # what the page's `pip install -e .` makes importable
    with FakeRagService(answers(), token=token(), path="/v1/answer", shape="sources") as service:
        try:
            first = run(script(shell_blocks(dagster=True)[:-1], service), tmp_path, env)  # all but the stop
            assert first.returncode == 0, first.stdout + first.stderr + _log(project)
            assert re.search(
                r"run \S+ \(support_bot__full_eval\): SUCCESS, release decision: SHIP", first.stdout
            )
            decision = json.loads(
                (project / "var" / "reports" / "latest" / "release_decision.json").read_text()
            )
            assert decision["decision"] == "ship"
            asked = sum(service.asked.values())
            assert asked == 5 + 5  # the command line's release, then the daemon's run

            service.traces = answers(worse=True)  # the service got worse: the same launch again
            again = run(script([_exports(), block("dagster job launch")], service, strict=False)
                        + "\necho exit=$?", project, env)  # fmt: skip
            assert again.stdout.rstrip().endswith("exit=1"), again.stdout + again.stderr + _log(project)
            assert "release decision: BLOCK" in again.stdout and "SUPPORT-BOT-001" in again.stdout
            assert sum(service.asked.values()) == asked + 5  # asked anew, not the last run's answers

            # Slack hears of it once, when the run ends (the run-status sensor, under the daemon).
            deadline = time.monotonic() + 120 * load_factor()
            while not fake_slack.posts and time.monotonic() < deadline:
                time.sleep(0.5)
            [post] = fake_slack.posts
            assert post["channel"] == "#support-bot-eval" and "Release blocked" in post["text"]
            assert "SUPPORT-BOT-001" in json.dumps(post)
            stopped = run(script([block('kill "$(cat var/daemon.pid)"')], service), project)
            assert stopped.returncode == 0, stopped.stderr
        finally:
            _stop_daemon(project)
    assert service.unauthorised == 0
    written = [p for p in project.rglob("*") if p.is_file() and ".answers" not in p.parts]
    assert all(token() not in p.read_text(errors="replace") for p in written if p.stat().st_size < 10**7)
    assert len(fake_slack.posts) == 1  # the ship said nothing, the block once


def _exports() -> str:
    """The page's `export` lines, as a reader's shell still has them."""
    return "\n".join(
        line for b in shell_blocks(dagster=True) for line in b.splitlines() if line.startswith("export")
    )


def _log(project: Path) -> str:
    log = project / "var" / "daemon.log"
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""


def _stop_daemon(project: Path) -> None:
    """Whatever the test's outcome, no daemon outlives it (the page's stop step may not have run)."""
    pid_file = project / "var" / "daemon.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60 * load_factor()
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
