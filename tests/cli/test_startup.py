"""``ragspine-eval`` starts without the heavy libraries: the parser imports only the standard library,
and each command imports what it needs when it runs (pandas never: pyarrow is told there is none). It
ends as it began, a process of its own: its output whole, its exit code kept, and 141 for a reader that
left. Each check is a fresh interpreter, because this test process has imported everything already.
(How long a start takes is measured, not asserted: ``bench/bench_cli_startup.py``.)"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from ragspine_pipeline.cli import main

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


def test_loading_the_code_location_imports_neither_scipy_nor_the_judge_sdk():
    """Every Dagster process of a deployment loads the code location (the code server, each run, each
    Celery worker): scipy (~0.5 s) is imported only where a statistic needs it, the judge's SDK only
    when a judge is called."""
    assert _loaded("import ragspine_pipeline.definitions", ("scipy", "openai", "krippendorff")) == []


def test_importing_the_command_loads_no_dagster_module_at_all():
    """Not even Dagster's own helpers (``dagster_shared``, ``dagster_pipes``): the core wheel has none."""
    probe = "import ragspine_pipeline.cli, sys; print([m for m in sys.modules if m.startswith('dagster')])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


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


COMMAND = [sys.executable, "-m", "ragspine_pipeline.cli"]
BUFFERED = {
    name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"
}  # as users run it


def _command(*args: str, env: dict[str, str] = BUFFERED, **kwargs) -> subprocess.CompletedProcess:
    """``ragspine-eval`` as the script runs it: a process of its own."""
    return subprocess.run([*COMMAND, *args], env=env, **kwargs)


SCORE = (
    "score",
    "--gold",
    str(EXAMPLE / "gold.jsonl"),
    "--trace",
    str(EXAMPLE / "traces.jsonl"),
    "--run-id",
    "x",
)


def test_the_scoring_process_never_imports_pandas_and_says_what_main_says(capsys):
    profiled = {**BUFFERED, "PYTHONPROFILEIMPORTTIME": "1"}
    done = _command(*SCORE, capture_output=True, text=True, env=profiled)
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import")}
    # "pandas" itself is listed: the one attempt the process refuses. Imported, it would bring its own.
    assert "pyarrow" in imported and [m for m in imported if m.startswith("pandas.")] == []
    code = main(list(SCORE))
    assert (done.returncode, json.loads(done.stdout)) == (code, json.loads(capsys.readouterr().out))


def test_pyarrow_still_converts_to_pandas_where_asked_after_being_told_there_is_none():
    code = (
        "import sys\nimport numpy as np\nfrom ragspine_pipeline.cli.app import _arrow_without_pandas\n"
        "_arrow_without_pandas()\nimport pyarrow as pa\n"
        "assert pa.array(np.arange(3)).to_pylist() == [0, 1, 2] and 'pandas' not in sys.modules\n"
        "assert pa.table({'a': [1, 2]}).to_pandas()['a'].tolist() == [1, 2]\nprint('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_process_ends_with_its_output_whole_and_its_exit_code(tmp_path, capsys):
    done = _command(*SCORE, "--format", "markdown", capture_output=True, text=True)
    assert main([*SCORE, "--format", "markdown"]) == done.returncode == 0
    assert done.stdout == capsys.readouterr().out and done.stdout.rstrip().endswith("| OK |")
    out = tmp_path / "report.json"
    assert _command(*SCORE, "--gates", "chr=0.99", "--out", str(out)).returncode == 1
    assert json.loads(out.read_text())["pass"] is False


def test_a_reader_that_leaves_early_ends_the_process_as_sigpipe_would_without_a_traceback(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_bytes((EXAMPLE / "gold.jsonl").read_bytes())
    for command in (  # a report larger than the stream's buffer, and a lock too small to leave it before exit
        [*SCORE, "--format", "markdown"],
        ["golden", "freeze", "--gold", str(gold), "--version", "v1", "--approved-by", "qa"],
    ):
        proc = subprocess.Popen(
            [*COMMAND, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=BUFFERED
        )
        proc.stdout.close()  # gone before anything is written
        err = proc.stderr.read().decode()
        assert proc.wait() == 128 + 13 and "Traceback" not in err and "Exception ignored" not in err
    assert json.loads(gold.with_name("gold.jsonl.lock").read_text())["version"] == "v1"
