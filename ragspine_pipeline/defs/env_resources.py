"""How the demo instance's ``defs.yaml`` reads a deployment configured by environment variables: the
template variables it names (``template_vars_module``), each read when the definitions load.

The ``defs.yaml`` is the one home of every setting: each line names the ``RAGSPINE_*`` variable it
reads and its default (docs/operations.md lists them); these functions only give a path its form and the
SUT its kind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from ragspine_pipeline.defs import resources
from ragspine_pipeline.errors import InputError

DEFAULT_HOME = "var/demo"


def _location(value: str) -> str:
    """A URI (s3://, postgresql://) as it is, a path made absolute against the working directory."""
    return value if "://" in value else str(Path(value).absolute())


def setting_path(env: Mapping[str, str], name: str, default: str | None) -> str | None:
    """The path the variable ``name`` gives (an empty one is unset), else ``default``; in the form
    :func:`_location` gives it, None when neither is given."""
    value = env.get(name) or default
    return _location(value) if value else None


def home_of(env: Mapping[str, str]) -> str:
    """``RAGSPINE_HOME``, the folder of the demo's inputs (default ``var/demo``), absolute."""
    return _location(env.get("RAGSPINE_HOME") or DEFAULT_HOME)


def sut_of(env: Mapping[str, str]) -> str | dict[str, Any]:
    """The SUT the environment declares, as a ``sut`` setting: ``RAGSPINE_SUT_CONFIG`` (a YAML file, as
    ``ragspine-eval replay --sut`` reads), else ``RAGSPINE_SUT`` = ``http`` (``RAGSPINE_SUT_URL``: POST to
    ``<url>/answer``), ``recorded`` (``RAGSPINE_SUT_RECORDED``) or ``reference`` (the default: the demo's
    engine over the index manifest)."""
    if env.get("RAGSPINE_SUT_CONFIG"):
        return _location(env["RAGSPINE_SUT_CONFIG"])
    kind = env.get("RAGSPINE_SUT", "").strip() or "reference"
    if kind == "reference":
        return {"kind": "reference"}
    if kind == "http":
        url = env.get("RAGSPINE_SUT_URL") or ""
        if not url:
            raise InputError("RAGSPINE_SUT_URL", "RAGSPINE_SUT=http needs the service's base URL")
        return {"kind": "http", "url": url.rstrip("/") + "/answer"}
    if kind == "recorded":
        path = env.get("RAGSPINE_SUT_RECORDED") or ""
        if not path:
            raise InputError("RAGSPINE_SUT_RECORDED", "RAGSPINE_SUT=recorded needs a trace file")
        return {"kind": "recorded", "path": _location(path)}
    raise InputError("RAGSPINE_SUT", f"unknown SUT {kind!r} (known: reference, http, recorded)")


# The template variables of the demo's defs.yaml: each reads the environment when the definitions load.


@dg.template_var
def home() -> str:
    """``RAGSPINE_HOME`` (default ``var/demo``), absolute: ``{{ home }}/golden/gold.jsonl``."""
    return home_of(os.environ)


@dg.template_var
def path() -> Callable[[str, str | None], str | None]:
    """``{{ path('RAGSPINE_GOLDEN', home ~ '/golden/gold.jsonl') }}``: the variable's path, else the
    default; absolute against the working directory, a URI as it is."""
    return lambda name, default=None: setting_path(os.environ, name, default)


@dg.template_var
def sut_from_env() -> Callable[[], str | dict[str, Any]]:
    """``{{ sut_from_env() }}``: the SUT ``RAGSPINE_SUT_CONFIG`` or ``RAGSPINE_SUT`` declares."""
    return lambda: sut_of(os.environ)


@dg.template_var
def packaged_gates() -> str:
    """The demo's gates config as the package holds it."""
    return str(resources.packaged_gates())
