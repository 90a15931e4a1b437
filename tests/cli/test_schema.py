"""``ragspine-eval schema TYPE`` prints the JSON Schema its contract model declares, for every type."""

from __future__ import annotations

import json

import pytest

from ragspine_pipeline.cli import main
from ragspine_pipeline.cli.parser import SCHEMA_TYPES
from ragspine_pipeline.cli.schema import RECORD_TYPES


def test_every_record_type_the_command_offers_has_a_model():
    assert tuple(RECORD_TYPES) == SCHEMA_TYPES


@pytest.mark.parametrize("kind", SCHEMA_TYPES)
def test_the_schema_is_the_models(capsys, kind):
    assert main(["schema", kind]) == 0
    schema = json.loads(capsys.readouterr().out)
    model = RECORD_TYPES[kind]
    assert schema["title"] == model.__name__
    assert set(schema["properties"]) == set(model.model_fields)
    required = {name for name, field in model.model_fields.items() if field.is_required()}
    assert set(schema.get("required", [])) == required


def test_a_trace_schema_states_the_union_of_answer_forms(capsys):
    main(["schema", "trace"])
    answer = json.loads(capsys.readouterr().out)["properties"]["answer"]
    assert {"$ref": "#/$defs/Answer"} in answer["anyOf"] and {"type": "string"} in answer["anyOf"]
