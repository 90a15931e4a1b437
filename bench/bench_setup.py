"""How long a fresh machine takes to get a working .venv: the Makefile's bootstrap against pip.

    python bench/bench_setup.py [--repeat 1] [--warm]

Each method builds a new virtual environment in a temporary folder, with the package caches off
(`UV_NO_CACHE`, `PIP_NO_CACHE_DIR`) unless `--warm`, so every wheel is downloaded as on a new machine:

* `make`: exactly the Makefile's `$(VENV)/.installed` target (a venv, pip installs the pinned uv, uv
  installs requirements.lock with its hashes, then the project editable without dependencies);
* `pip`: what the Makefile did before the lock (a venv, pip upgraded, `pip install -e '.[dev]'`,
  pip resolving every dependency itself).

Prints the wall time of each and checks that both environments hold the same versions of the
packages the project names directly. Needs PyPI (the only network this bench touches).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable if sys.prefix == sys.base_prefix else str(Path(sys.base_prefix) / "bin" / "python3")
DIRECT = (
    "dagster",
    "pandas",
    "pyarrow",
    "numpy",
    "pydantic",
    "boto3",
    "slack-sdk",
    "scipy",
    "moto",
    "pytest",
)


def run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def with_make(venv: Path, env: dict[str, str]) -> None:
    run(["make", f"VENV={venv}", f"PYTHON={PYTHON}", f"{venv}/.installed"], env)


def with_pip(venv: Path, env: dict[str, str]) -> None:
    run([PYTHON, "-m", "venv", str(venv)], env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    run([*pip, "--upgrade", "pip"], env)
    run([*pip, "-e", ".[dev]"], env)


def versions(venv: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pairs = (line.split("==") for line in out.splitlines() if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warm", action="store_true", help="keep the package caches (a second set-up)")
    args = parser.parse_args()
    env = {**os.environ}
    env.pop("VIRTUAL_ENV", None)
    if not args.warm:
        env.update(UV_NO_CACHE="1", PIP_NO_CACHE_DIR="1")
    times: dict[str, list[float]] = {"make": [], "pip": []}
    installed: dict[str, dict[str, str]] = {}
    for _ in range(args.repeat):
        for name, method in (("make", with_make), ("pip", with_pip)):
            with tempfile.TemporaryDirectory(prefix=f"ragspine-setup-{name}-") as folder:
                venv = Path(folder) / ".venv"
                started = time.perf_counter()
                method(venv, env)
                times[name].append(time.perf_counter() - started)
                installed[name] = versions(venv)
    for name, measured in times.items():
        each = ", ".join(f"{t:.1f}" for t in measured)
        print(f"{name:>5}: median {statistics.median(measured):6.1f} s  ({each})")
    print(f"pip / make: {statistics.median(times['pip']) / statistics.median(times['make']):.1f}x")
    differ = {p: (installed["make"].get(p), installed["pip"].get(p)) for p in DIRECT}
    differ = {p: v for p, v in differ.items() if v[0] != v[1]}
    print("same versions of the direct dependencies" if not differ else f"versions differ: {differ}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
