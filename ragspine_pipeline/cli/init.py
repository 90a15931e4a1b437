"""``ragspine-eval init DIR``: a new evaluation project for your service.

Writes a golden-set template (``golden/gold.jsonl`` and ``golden/CASES.md`` explaining each case), a
commented gates config, the SUT's settings (``sut.yaml``, pointing at ``--sut-url``), ``.env.example``
(the token and the release being evaluated, ``<SERVICE>_RELEASE``), a README with the commands of each
release (its replay keyed on ``--release``), and the same service as a Dagster project
(``pyproject.toml``, ``<service>_evaluation/defs/<service>/defs.yaml``: ``dg check defs``, ``dg dev``).
Refuses a folder that exists and is not empty.
"""

from __future__ import annotations

import argparse
import json
import re
from importlib import resources
from pathlib import Path

from ragspine_pipeline.cli.args import EXIT_PASS, UsageError
from ragspine_pipeline.errors import InputError

TEMPLATE = "project_template"
# A dotfile is not package data everywhere; the component's defs.yaml goes where Dagster looks for it.
RENAMED = {"env.example": ".env.example", "defs.yaml": "{package}/defs/{service}/defs.yaml"}
DEFINITIONS = """from pathlib import Path

import dagster as dg

defs = dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


def service_name(folder: Path) -> str:
    """``support-bot`` → ``support_bot``: a name that is an identifier (for settings and variables)."""
    name = re.sub(r"[^a-z0-9]+", "_", folder.name.strip().lower()).strip("_")
    if not name or name[0].isdigit():
        name = f"service_{name}".rstrip("_")
    return name[:63].rstrip("_")


SERVICE_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


def _sut_url(url: str) -> str:
    """``url`` when it is an http(s) URL on one line; a usage error otherwise (it goes into sut.yaml)."""
    if any(ord(char) < 32 or ord(char) == 127 for char in url) or not re.match(r"https?://[^/\s]", url):
        raise UsageError(f"init: --sut-url {url!r}: not an http:// or https:// URL on one line")
    return url


def run_init(args: argparse.Namespace) -> int:
    target = Path(args.folder)
    if target.is_symlink() and not target.exists():
        raise InputError(str(target), "is a symbolic link to nothing: init writes a new project in a folder")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(str(target), "exists and is not an empty folder: init writes a new project")
    service = args.service or service_name(target.absolute())
    if not SERVICE_NAME.fullmatch(service):
        raise UsageError(
            f"init: --service {service!r}: a service name is lower-case letters, digits and underscores, "
            "starting with a letter (it names a Python package, settings and asset keys)"
        )
    values = {
        "{{SERVICE}}": service,
        "{{SERVICE_ENV}}": service.upper(),
        "{{SERVICE_PREFIX}}": service.upper().replace("_", "-"),
        "{{SUT_URL}}": json.dumps(_sut_url(args.sut_url)),  # a JSON string is a YAML string: quoted
    }
    package = f"{service}_evaluation"
    template = resources.files("ragspine_pipeline").joinpath(TEMPLATE)
    written = []
    for source, relative in _files(template, Path()):
        text = source.read_text(encoding="utf-8")
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        renamed = RENAMED.get(relative.as_posix(), relative.as_posix())
        written.append(_write(target / renamed.format(package=package, service=service), text))
    written.append(_write(target / package / "__init__.py", ""))
    written.append(_write(target / package / "defs" / "__init__.py", ""))
    written.append(_write(target / package / "definitions.py", DEFINITIONS))
    (target / "traces").mkdir()
    listed = ", ".join(sorted(path.relative_to(target).as_posix() for path in written))
    print(f"{target}: a new evaluation project for {service} ({listed})")
    print(
        f"next: set {service.upper()}_TOKEN and {service.upper()}_RELEASE, then follow {target / 'README.md'}"
    )
    return EXIT_PASS


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _files(folder, relative: Path):
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.startswith(("__", ".")):
            continue
        if entry.is_dir():
            yield from _files(entry, relative / entry.name)
        else:
            yield entry, relative / entry.name
