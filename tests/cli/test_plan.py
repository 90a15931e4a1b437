"""``ragspine-eval plan``: one line per configuration, exit 0; unusable input one line, exit 2."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.cli import plan as plan_module
from ragspine_pipeline.decision.detectable import points_up
from ragspine_pipeline.scoring import power, sample_plan
from ragspine_pipeline.scoring.drop_settings import DropSettings


def run(capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_a_golden_set_of_cases(capsys):
    code, out, err = run(capsys, "--cases", "50")
    expected = power.paired_detectable_drop(50, power.PairedDesign(flip_rate=0.05))
    assert code == 0 and err == [] and len(out) == 1
    assert out[0].startswith(f"with 50 cases, drops under {points_up(expected)} points")
    assert "not reliably caught (80 % power; paired test" in out[0]


def test_a_golden_file_and_the_nightly_sample(tmp_path, capsys):
    gold = tmp_path / "gold.jsonl"
    rows = [{"qid": f"q{i}", "question": f"q {i}?", "answerable": True} for i in range(30)]
    gold.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, out, _ = run(capsys, "--golden", str(gold), "--nightly", "--sample-size", "1000", "--rate", "0.9")
    assert code == 0 and len(out) == 2
    assert out[0].startswith("with 30 cases, drops under ")
    assert out[1].startswith("with 1,000 traces a night at a rate of 90 %, drops under 4 points")
    assert "α = fdr 0.02 / 10 tests = 0.002" in out[1]


def test_the_sample_size_a_drop_needs(capsys):
    code, out, _ = run(
        capsys, "--cases", "50", "--drop", "0.1", "--nightly", "--alpha", "0.025", "--drop", "0.05"
    )
    assert code == 0
    assert out[0].startswith("a 5-point drop needs ")  # --drop applies to both lines
    assert out[1].startswith("a 5-point drop at a rate of 90 % needs 364 traces a night")


def test_strict_reports_its_false_blocks(capsys):
    code, out, _ = run(capsys, "--cases", "50", "--baseline-test", "strict")
    assert code == 0 and "it blocks an unchanged system on" in out[0]


def test_more_cases_print_a_smaller_drop(capsys):
    figures = []
    for cases in ("50", "200", "1000"):
        _, out, _ = run(capsys, "--cases", cases)
        figures.append(float(out[0].split("drops under ")[1].split(" points")[0]))
    assert figures == sorted(figures, reverse=True) and len(set(figures)) == 3


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--cases", "0"],
        ["--cases", "5", "--golden", "g.jsonl"],
        ["--golden", "does-not-exist.jsonl"],
        ["--nightly", "--power", "1"],
        ["--nightly", "--tau2", "-1"],
        ["--nightly", "--rate", "0.5", "--drop", "0.6"],
    ],
)
def test_unusable_input_exits_2(capsys, argv):
    code = None
    try:
        code = main(["plan", *argv])
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    _, err = capsys.readouterr()
    assert code == 2 and "error:" in err.splitlines()[-1]


def test_the_help_names_the_defaults_the_command_applies(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {plan_module.DEFAULT_SAMPLE_SIZE})" in text
    assert f"(default {plan_module.DEFAULT_RATE:g})" in text
    assert f"(default {plan_module.DEFAULT_FLIP_RATE:g})" in text
    assert f"(default {DropSettings().fdr:g})" in text
    assert f"(default {DropSettings().window})" in text
    assert f"(default {sample_plan.nightly_tests(DropSettings()):g}:" in text
    assert f"(default {plan_module.DEFAULT_POWER:g})" in text


def _plan_with_config(capsys, config, *argv: str) -> list[str]:
    """``plan`` with ``--config`` (set on the parsed options: the parser names it once it lists it)."""
    from ragspine_pipeline.cli.parser import build_parser

    args = build_parser().parse_args(["plan", *argv])
    args.config = str(config)
    assert plan_module.run_plan(args) == 0
    return capsys.readouterr().out.splitlines()


def test_a_config_s_sample_target_prints_the_size_it_implies(tmp_path, capsys):
    config = tmp_path / "gates.yaml"
    config.write_text("production:\n  window: 7\n  sample: {detect: 0.05, max: 20000}\n")
    out = _plan_with_config(capsys, config, "--nightly", "--rate", "0.9", "--tau2", "0.0001")
    design = power.NightlyDesign(
        rate=0.9, alpha=0.02 / sample_plan.nightly_tests(DropSettings(window=7)), tau2=0.0001, window=7
    )
    needed = power.nightly_sample_size(0.05, design)
    assert len(out) == 2 and "7 trailing nights" in out[0]  # the config's window
    assert out[1].startswith("production.sample: a 5-point drop with 80 % power at a rate of 90 % → ")
    assert f" → {needed:,} traces a night" in out[1]
    assert "(what the target needs;" in out[1] and "fixed size 200" in out[1]
    # Capped by max, never below the fixed size, and unreachable when τ² alone hides the drop.
    config.write_text("production:\n  sample: {detect: 0.05, max: 300}\n")
    assert (
        " → 300 traces a night (the max; the target needs "
        in _plan_with_config(capsys, config, "--nightly", "--rate", "0.9", "--tau2", "0.0001")[1]
    )
    assert (
        " → 5,000 traces a night (the fixed size; "
        in _plan_with_config(capsys, config, "--nightly", "--rate", "0.9", "--sample-size", "5000")[1]
    )
    unreachable = _plan_with_config(capsys, config, "--nightly", "--rate", "0.9", "--tau2", "0.01")[1]
    assert "no nightly sample catches a 5-point drop" in unreachable
    assert "300 traces a night, the max" in unreachable
    config.write_text("k: 5\n")  # no target: the nightly line alone
    assert len(_plan_with_config(capsys, config, "--nightly")) == 1


def test_slices_add_their_tests_to_the_night_s_level(capsys):
    assert sample_plan.nightly_tests(DropSettings(), slices=8) == pytest.approx(22.0)  # 10 + 8 × 3 × 6 / 12
    assert main(["plan", "--nightly", "--rate", "0.9", "--slices", "8"]) == 0
    assert "/ 22 tests" in capsys.readouterr().out
