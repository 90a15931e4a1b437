"""docs/your-service.md, followed literally: every `sh` block of the page run in order in one shell
(the install aside: the package is installed already), against a stand-in for the reader's service on
loopback that checks the bearer token. The release must ship, and a second release that got worse, its
release step run again in the same project with the answers folder kept, must be asked every question
and be blocked by the baseline the first one promoted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.fake_rag_service import FakeRagService

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "your-service.md"
SERVICE_URL = "https://support-bot.internal/v1/answer"
TEMPLATE_GOLD = ROOT / "ragspine_pipeline" / "project_template" / "golden" / "gold.jsonl"


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


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


def run_doc(folder: Path, service: FakeRagService) -> subprocess.CompletedProcess:
    script = "set -eu\n" + "\n".join(
        line.replace(SERVICE_URL, service.url)
        for block in shell_blocks()
        for line in block.splitlines()
        if not line.startswith("pip install")
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_page_followed_literally_ships_a_good_release_and_blocks_a_worse_one(tmp_path):
    assert len(shell_blocks()) >= 3
    token = re.search(r"export SUPPORT_BOT_TOKEN=(\S+)", DOC.read_text()).group(1)
    with FakeRagService(answers(), token=token, path="/v1/answer") as service:
        first = run_doc(tmp_path, service)
        assert first.returncode == 0, first.stdout + first.stderr
        project = tmp_path / "support-bot"
        decision = json.loads((project / "decision.json").read_text())
        assert decision["release"]["decision"] == "ship" and decision["under_refusal"] == 0.0
        assert json.loads((project / "baseline.json").read_text())  # promoted
        assert service.unauthorised == 0 and token not in first.stdout + first.stderr
        assert "  under_refusal = 0 over 2" in first.stdout  # check-traces read the configured refusals
        assert sum(service.asked.values()) == 5

        # The next release is deployed at the same address, worse on one case: the page's release
        # step again, in the same project, its .answers kept, under the new release's name.
        service.traces = answers(worse=True)
        service.asked.clear()
        release, named = re.subn(r"(export SUPPORT_BOT_RELEASE=)\S+", r"\g<1>2026.11.2", shell_blocks()[-1])
        assert named == 1 and (project / ".answers").is_dir()
        script = "set -u\n" + release + "\necho exit=$?"
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        second = subprocess.run(
            ["bash", "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
    assert second.stdout.rstrip().endswith("exit=1"), second.stdout + second.stderr
    assert sum(service.asked.values()) == 5  # every question asked of the new release
    decision = json.loads((project / "decision.json").read_text())
    blocked = decision["release"]
    assert blocked["decision"] == "block" and blocked["regressions"]
    assert not [warning for warning in decision["warnings"] if "reused" in warning]
