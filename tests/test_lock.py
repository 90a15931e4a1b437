"""requirements.lock is what `make` installs: it must agree with pyproject.toml, and pin with hashes;
requirements-runtime.lock (the image's) holds the deploy and judge extras at the same versions, and no
test tool."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def locked(text: str) -> dict[str, list[tuple[str, str | None, int]]]:
    """``{name: [(version, marker, hashes)]}`` of a `uv pip compile --generate-hashes` file."""
    pins: dict[str, list[tuple[str, str | None, int]]] = {}
    current = None
    for line in text.splitlines():
        match = PIN.match(line)
        if match:
            name, version, marker = match.groups()
            current = [version, marker, 0]
            pins.setdefault(canonicalize_name(name), []).append(current)  # type: ignore[arg-type]
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            current[2] += 1
    return {name: [tuple(entry) for entry in entries] for name, entries in pins.items()}  # type: ignore[misc]


def declared() -> list[Requirement]:
    """Every requirement of the project and of each of its extras (`make` installs the dev extra, which
    includes all the others)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    requirements = [
        Requirement(text) for text in [*project["dependencies"], *(r for e in extras.values() for r in e)]
    ]
    return [r for r in requirements if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def test_the_dev_extra_includes_every_other_extra():
    """`make` installs the dev extra: the suite runs with every extra there is."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    [own] = [Requirement(r) for r in extras["dev"] if Requirement(r).name == project["name"]]
    assert own.extras == set(extras) - {"dev"}


def test_the_lock_satisfies_every_declared_requirement():
    pins = locked((ROOT / "requirements.lock").read_text())
    for requirement in declared():
        entries = pins.get(canonicalize_name(requirement.name))
        assert entries, f"{requirement.name} is declared in pyproject.toml but not locked: run make lock"
        for version, _marker, _hashes in entries:
            assert requirement.specifier.contains(version, prereleases=True), (
                f"requirements.lock pins {requirement.name}=={version}, outside {requirement}: run make lock"
            )


def test_every_pin_has_a_hash_and_one_version_per_python():
    pins = locked((ROOT / "requirements.lock").read_text())
    assert len(pins) > 50
    for name, entries in pins.items():
        assert all(hashes for _v, _m, hashes in entries), f"{name} has no hash"
        for python in ("3.11.7", "3.12.1"):
            environment = {"python_full_version": python, "python_version": python[:4]}
            applying = [
                v for v, marker, _h in entries if marker is None or Marker(marker).evaluate(environment)
            ]
            assert len(applying) <= 1, f"{name}: {applying} for Python {python}"


def test_the_reader_of_the_lock_sees_markers_and_hashes():
    text = (
        "numpy==2.4.6 ; python-full-version < '3.12' \\\n"
        "    --hash=sha256:aa \\\n"
        "    --hash=sha256:bb\n"
        "numpy==2.5.5 ; python-full-version >= '3.12' \\\n"
        "    --hash=sha256:cc\n"
        "pip==26.3\n"
    )
    assert locked(text) == {
        "numpy": [
            ("2.4.6", "python-full-version < '3.12'", 2),
            ("2.5.5", "python-full-version >= '3.12'", 1),
        ],
        "pip": [("26.3", None, 0)],
    }


def test_the_runtime_lock_is_the_dev_lock_without_the_test_tools():
    runtime = locked((ROOT / "requirements-runtime.lock").read_text())
    dev = locked((ROOT / "requirements.lock").read_text())
    assert runtime and set(runtime) < set(dev)
    for name, entries in runtime.items():  # the image runs what the suite ran
        assert {v for v, _m, _h in entries} <= {v for v, _m, _h in dev[name]}, name
        assert all(hashes for _v, _m, hashes in entries), f"{name} has no hash"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    test_tools = [Requirement(r) for r in project["optional-dependencies"]["dev"]]
    test_tools = {canonicalize_name(r.name) for r in test_tools if r.name != project["name"]}
    assert test_tools and not test_tools & set(runtime)  # pytest, hypothesis, moto, build, ... stay out
    for extra in ("deploy", "judge", "dagster"):
        for text in project["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if requirement.name != project["name"]:
                assert canonicalize_name(requirement.name) in runtime, requirement.name
