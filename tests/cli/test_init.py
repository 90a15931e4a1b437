"""`ragspine-eval init DIR`: a new project whose files load as they are, for a service named after the
folder; a folder that holds anything is refused with one line."""

from __future__ import annotations

from ragspine_pipeline.cli import main
from ragspine_pipeline.contracts.columns import load_gold
from ragspine_pipeline.decision.config import load_config
from ragspine_pipeline.decision.evaluation import KNOWN_METRICS
from ragspine_pipeline.sources.sut import HttpSut, load_sut_settings


def test_the_project_loads_as_written(tmp_path, capsys):
    folder = tmp_path / "Billing Bot"
    assert main(["init", str(folder), "--sut-url", "https://billing.internal/ask"]) == 0
    assert "a new evaluation project for billing_bot" in capsys.readouterr().out
    gold = load_gold(folder / "golden" / "gold.jsonl").table
    assert gold.column("qid").to_pylist()[0] == "BILLING-BOT-001" and gold.num_rows == 5
    config = load_config(folder / "gates.yaml", KNOWN_METRICS)
    assert "I'm sorry, I don't know." in config.refusals.phrases and config.gate_list(KNOWN_METRICS)
    sut = load_sut_settings(folder / "sut.yaml")
    assert isinstance(sut, HttpSut) and sut.url == "https://billing.internal/ask"
    assert sut.headers == {"Authorization": "Bearer ${BILLING_BOT_TOKEN}"}
    assert {"BILLING_BOT_TOKEN=", "BILLING_BOT_RELEASE="} <= set(
        (folder / ".env.example").read_text().splitlines()
    )
    readme = (folder / "README.md").read_text()
    assert '--sut sut.yaml --release "$BILLING_BOT_RELEASE"' in readme  # each release's answers its own
    assert '# release: "${GIT_COMMIT}"' in (folder / "sut.yaml").read_text()


def test_a_folder_that_holds_anything_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
