"""The package as a user gets it: `python -m build --wheel` gives one pure-Python wheel; installed into a
fresh virtualenv with no compiler on PATH and no extra, it gives the `ragspine-eval` command and the
scoring core without Dagster; with the dagster extra, the code location loads. Installs resolve against
requirements.lock (the versions the suite runs on) and refuse every source distribution."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ragspine_pipeline
from ragspine_pipeline.cli import main

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
UV = Path(sys.executable).with_name("uv")  # installed by make, pinned like everything else
COMPILERS = ("cc", "gcc", "clang", "c++", "g++")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources: a build in the checkout would write build/ and
    *.egg-info into it, under the feet of another run of the suite."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "ragspine_pipeline", source / "ragspine_pipeline", ignore=ignore)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = sorted(dist.iterdir())
    assert [w.name for w in wheels] == [f"ragspine_pipeline-{ragspine_pipeline.__version__}-py3-none-any.whl"]
    return wheels[0]


def fresh_venv(path: Path, requirement: str) -> dict[str, str]:
    """A new virtualenv at ``path`` with ``requirement`` installed from wheels only, every process with
    nothing but the virtualenv on PATH; the environment to run its commands in."""
    if not UV.exists():
        pytest.skip(f"uv is not beside {sys.executable} (make installs it)")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    bin_dir = path / "bin"
    env = {name: value for name, value in os.environ.items() if name not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = str(bin_dir)
    assert [c for c in COMPILERS if shutil.which(c, path=env["PATH"])] == []
    install = [str(UV), "pip", "install", "--python", str(bin_dir / "python"), "--no-build"]
    installed = subprocess.run(
        [*install, "--constraint", str(ROOT / "requirements.lock"), requirement],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return env


def run(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """A command of the virtualenv, from a folder outside the checkout (so that the checkout's own
    package cannot be imported by accident)."""
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_wheel_is_pure_python_and_carries_the_package_data(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = archive.read(f"ragspine_pipeline-{ragspine_pipeline.__version__}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: true" in info and "Tag: py3-none-any" in info
    sources = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "ragspine_pipeline").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "ragspine_pipeline/demo/gates.yaml" in sources
    assert sources <= names, sorted(sources - names)  # every module (defs/ included) and the demo's data
    assert not [n for n in names if n.startswith(("tests/", "examples/", "bench/")) or n.endswith(".c")]


def test_the_core_wheel_gives_the_command_without_dagster_or_a_compiler(wheel, tmp_path):
    venv = tmp_path / "venv"
    env = fresh_venv(venv, str(wheel))
    work = tmp_path / "work"
    work.mkdir()
    command = str(venv / "bin" / "ragspine-eval")

    version = run(env, work, command, "--version")
    assert (version.returncode, version.stdout) == (0, f"ragspine-eval {ragspine_pipeline.__version__}\n")

    # The installed command scores the examples exactly as the checkout does.
    wfgy = [
        "score",
        "--gold",
        str(EXAMPLES / "wfgy/gold.jsonl"),
        "--trace",
        str(EXAMPLES / "wfgy/traces.jsonl"),
    ]
    installed = run(env, work, command, *wfgy, "--run-id", "x", "--out", str(tmp_path / "installed.json"))
    assert installed.returncode in (0, 1), installed.stderr
    here = main([*wfgy, "--run-id", "x", "--out", str(tmp_path / "checkout.json")])
    assert installed.returncode == here
    report = json.loads((tmp_path / "installed.json").read_text())
    assert report["n_cases"] == 20 and report["gates"]
    assert report == json.loads((tmp_path / "checkout.json").read_text())

    layered = run(
        env,
        work,
        command,
        "score",
        "--gold",
        str(EXAMPLES / "layered/gold.jsonl"),
        "--trace",
        str(EXAMPLES / "layered/traces.jsonl"),
        "--evidence",
        str(EXAMPLES / "layered/evidence.jsonl"),
        "--config",
        str(EXAMPLES / "layered/gates.yaml"),
    )
    assert layered.returncode in (0, 1), layered.stderr
    assert "Traceback" not in layered.stderr and json.loads(layered.stdout)["gates"]

    # The packaged demo data (gates.yaml) is in the wheel and found through importlib.resources.
    demo = run(env, work, command, "demo", "init", "--root", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stderr
    assert (tmp_path / "demo" / "gates.yaml").read_text() == (
        ROOT / "ragspine_pipeline" / "demo" / "gates.yaml"
    ).read_text()

    # So is what `init` writes for a new service's project.
    project = run(env, work, command, "init", str(tmp_path / "support-bot"))
    assert project.returncode == 0, project.stderr
    written = sorted(
        p.relative_to(tmp_path / "support-bot").as_posix() for p in (tmp_path / "support-bot").rglob("*")
    )
    assert {".env.example", "gates.yaml", "golden/gold.jsonl", "sut.yaml", "pyproject.toml"} <= set(written)
    assert "support_bot_evaluation/defs/support_bot/defs.yaml" in written

    judge = run(env, work, command, "judge", "--trace", str(EXAMPLES / "wfgy/traces.jsonl"))
    assert judge.returncode == 2
    assert (
        judge.stderr == "ragspine-eval judge: needs the judge extra: pip install 'ragspine-pipeline[judge]'\n"
    )

    probe = (
        "import importlib.util, sys, ragspine_pipeline.cli\n"
        "assert not any(m.startswith('dagster') for m in sys.modules), 'a dagster module was imported'\n"
        "print(ragspine_pipeline.cli.__file__)\n"
        "print(sorted(n for n in ('dagster', 'pandas', 'openai', 'psycopg2') if importlib.util.find_spec(n)))"
    )
    done = run(env, work, str(venv / "bin" / "python"), "-c", probe)
    assert done.returncode == 0, done.stderr
    location, present = done.stdout.splitlines()
    assert Path(location).is_relative_to(venv)  # the installed package, not the checkout
    assert present == "[]"  # none of the extras came with the core


def test_the_dagster_extra_loads_the_code_location_without_the_judge_or_deploy_extras(wheel, tmp_path):
    venv = tmp_path / "venv"
    env = fresh_venv(venv, f"{wheel}[dagster]")
    work = tmp_path / "work"
    work.mkdir()
    probe = (
        "import importlib.util\n"
        "from ragspine_pipeline.definitions import defs\n"
        "print(sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith('__')))\n"
        "print(sorted(n for n in ('openai', 'krippendorff', 'psycopg2', 'dagster_postgres')"
        " if importlib.util.find_spec(n)))"
    )
    done = run(env, work, str(venv / "bin" / "python"), "-c", probe)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs, present = done.stdout.splitlines()[-2:]
    assert jobs == str(["full_eval", "nightly_eval", "reeval_on_index_rebuild"])
    assert present == "[]"
    for tool in ("dg", "dagster-webserver"):
        assert (venv / "bin" / tool).exists(), tool
