"""``ragspine-eval`` starts without the heavy libraries: the parser imports only the standard library,
and each command imports what it needs when it runs. Each check is a fresh interpreter, because this
test process has imported everything already. (How long a start takes is measured, not asserted:
``bench/bench_cli_startup.py``.)"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wfgy"
HEAVY = ("dagster", "scipy", "openai", "boto3", "botocore")
CORE = ("pyarrow", "pydantic", "numpy", "pandas", "yaml")


def _loaded(code: str, tops: tuple[str, ...]) -> list[str]:
    """The modules (top-level names in ``tops``) a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {set(tops)!r}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return ast.literal_eval(done.stdout.strip().splitlines()[-1])


def test_importing_the_command_imports_no_heavy_library():
    assert _loaded("import ragspine_pipeline.cli", HEAVY) == []


def test_importing_the_command_imports_no_command_and_none_of_the_core():
    assert _loaded("import ragspine_pipeline.cli", CORE) == []
    project = _loaded("import ragspine_pipeline.cli", ("ragspine_pipeline",))
    assert "ragspine_pipeline.cli.parser" in project
    commands = ("score", "golden", "extraction", "sample", "judge", "demo", "alerts")
    assert [m for m in project if m.removeprefix("ragspine_pipeline.cli.") in commands] == []
    layers = ("contracts", "scoring", "decision", "reports", "alerts", "defs", "demo")
    assert [m for m in project if m.startswith(tuple(f"ragspine_pipeline.{x}." for x in layers))] == []


def test_scoring_a_local_golden_set_imports_neither_dagster_nor_scipy_nor_the_aws_or_openai_sdk(tmp_path):
    score = (
        "from ragspine_pipeline.cli import main\n"
        f"code = main(['score', '--gold', {str(EXAMPLE / 'gold.jsonl')!r}, "
        f"'--trace', {str(EXAMPLE / 'traces.jsonl')!r}, '--out', {str(tmp_path / 'report.json')!r}])\n"
        "assert code in (0, 1), code"
    )
    assert _loaded(score, ("dagster", "scipy", "openai", "boto3")) == []
    assert json.loads((tmp_path / "report.json").read_text())["gates"]
