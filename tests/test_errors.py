"""InputError: one line, and it survives a pickle (results carrying quarantined lines cross Dagster steps)."""

from __future__ import annotations

import pickle

import pytest

from ragspine_pipeline.errors import InputError


def test_an_input_error_is_one_line_and_pickles_whole():
    error = InputError("facts.jsonl", "malformed\n cell ref", 7, "Summary!A0", "cell_ref")
    assert str(error) == "facts.jsonl:7: id=Summary!A0: field 'cell_ref': malformed cell ref"
    copy = pickle.loads(pickle.dumps(error))
    assert copy == error and str(copy) == str(error)


def test_an_input_error_can_pass_through_a_context_manager():
    from contextlib import contextmanager

    @contextmanager
    def guarded():
        yield

    with pytest.raises(InputError, match=r"^gates\.yaml:3: malformed YAML$"), guarded():
        raise InputError("gates.yaml", "malformed YAML", 3)
