"""The judge's prompts carry the anchors and the length instruction; replies are read strictly."""

from __future__ import annotations

import pytest

from ragspine_pipeline.judge.prompts import (
    ANCHORS,
    LENGTH_INSTRUCTION,
    METRICS,
    PROMPT_VERSION,
    STRICT_REMINDER,
    JudgeItem,
    JudgeOutputError,
    build_messages,
    judgment_key,
    metric_inputs,
    parse_judgment,
)

ITEM = JudgeItem(
    "q1",
    question="How long is the release freeze?",
    answer="Five working days before a major launch.",
    context=("The freeze starts five working days before a major launch.", "Unrelated chunk."),
    reference=("five working days",),
)


@pytest.mark.parametrize("metric", METRICS)
def test_every_prompt_has_its_anchors_the_length_instruction_and_the_output_contract(metric):
    messages = build_messages(metric, metric_inputs(metric, ITEM))
    text = "\n".join(m["content"] for m in messages)
    assert LENGTH_INSTRUCTION in messages[0]["content"]
    for score, anchor in ANCHORS[metric].items():
        assert f"{score} = {anchor}" in text
    assert '"score"' in text and '"reason"' in text
    assert [m["role"] for m in messages] == ["system", "user"]
    retry = build_messages(metric, metric_inputs(metric, ITEM), unreadable_reply="Sure! 4/5")
    assert [m["role"] for m in retry] == ["system", "user", "assistant", "user"]
    assert retry[-1]["content"] == STRICT_REMINDER and LENGTH_INSTRUCTION in retry[0]["content"]


def test_anchors_run_from_fabricated_or_off_topic_to_fully_supported():
    assert ANCHORS["faithfulness"][5].startswith("fully supported") and ANCHORS["faithfulness"][1].startswith(
        "fabricated"
    )
    assert ANCHORS["answer_relevancy"][1].startswith("off topic")
    assert ANCHORS["context_recall"][5].startswith("all key facts") and ANCHORS["context_recall"][
        1
    ].startswith("none")


def test_each_metric_sees_only_its_inputs_and_does_not_apply_without_them():
    assert set(metric_inputs("faithfulness", ITEM)) == {"answer", "context"}
    assert set(metric_inputs("answer_relevancy", ITEM)) == {"question", "answer"}
    assert set(metric_inputs("context_recall", ITEM)) == {"answer", "reference"}
    bare = JudgeItem("q2", question="Why?", answer="  ")
    assert all(metric_inputs(metric, bare) is None for metric in METRICS)
    no_context = JudgeItem("q3", question="Why?", answer="Because.", context=("", " "))
    assert metric_inputs("faithfulness", no_context) is None
    assert metric_inputs("answer_relevancy", no_context) is not None


def test_the_cache_key_changes_with_model_metric_inputs_and_prompt_version(monkeypatch):
    inputs = metric_inputs("faithfulness", ITEM)
    key = judgment_key("m1", "faithfulness", inputs)
    assert key == judgment_key("m1", "faithfulness", dict(reversed(list(inputs.items()))))
    assert key != judgment_key("m2", "faithfulness", inputs)
    assert key != judgment_key("m1", "faithfulness", {**inputs, "answer": "Six working days."})
    monkeypatch.setattr("ragspine_pipeline.judge.prompts.PROMPT_VERSION", PROMPT_VERSION + "-next")
    assert key != judgment_key("m1", "faithfulness", inputs)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"score": 4, "reason": "supported"}', (4, "supported")),
        ('  {"reason": "spread\\n over  lines", "score": 1}\n', (1, "spread over lines")),
    ],
)
def test_a_well_formed_reply(reply, expected):
    assert parse_judgment(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "4",
        "Score: 4 — supported",
        '```json\n{"score": 4, "reason": "x"}\n```',
        '{"score": 6, "reason": "x"}',
        '{"score": 0, "reason": "x"}',
        '{"score": 4.5, "reason": "x"}',
        '{"score": "4", "reason": "x"}',
        '{"score": true, "reason": "x"}',
        '{"score": 4}',
        '{"score": 4, "reason": "x", "confidence": 0.9}',
        '[{"score": 4, "reason": "x"}]',
    ],
)
def test_anything_else_is_an_error_never_a_score(reply):
    with pytest.raises(JudgeOutputError):
        parse_judgment(reply)
