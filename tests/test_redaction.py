"""PII redaction: every kind found and counted, look-alike figures and ids kept, traces copied not mutated."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from ragspine_pipeline.redaction import redact_text, redact_trace


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to jane.doe@example.com today", "write to [EMAIL] today"),
        ("jane+billing@mail.eu.example.co.uk.", "[EMAIL]."),
        ("<ops_team-1@corp.example.org>", "<[EMAIL]>"),
        ("mailto:a@b.io", "mailto:[EMAIL]"),
    ],
)
def test_emails_are_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == (expected, Counter(EMAIL=1))


@pytest.mark.parametrize(
    "phone",
    [
        "+44 20 7946 0958",
        "+44 (0)20 7946 0958",
        "(415) 555-0132",
        "1 (415) 555-0132",
        "+1-415-555-0132",
        "+1 (415) 555-0132",
        "415.555.0132",
        "415 - 555 - 0132",
        "+33 1 42 68 53 00",
    ],
)
def test_phones_in_several_formats_are_redacted(phone: str) -> None:
    assert redact_text(f"call me on {phone}, thanks") == ("call me on [PHONE], thanks", Counter(PHONE=1))


def test_a_phone_region_other_than_the_default_reads_national_numbers() -> None:
    assert redact_text("ring 020 7946 0958")[0] == "ring 020 7946 0958"
    assert redact_text("ring 020 7946 0958", phone_region="GB") == ("ring [PHONE]", Counter(PHONE=1))


@pytest.mark.parametrize(
    "card", ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "3782 822463 10005"]
)
def test_luhn_valid_cards_are_redacted(card: str) -> None:
    assert redact_text(f"paid with {card}.") == ("paid with [CARD].", Counter(CARD=1))


@pytest.mark.parametrize(
    "text",
    [
        "order 4111111111111112 shipped",  # 16 digits, Luhn fails
        "1234 5678 9012 3456",  # grouped like a card, Luhn fails
        "revenue was 1702.0 in FY2025, up 12.5%",
        "as of 2025-11-20 and 2025/11/20 at 12:30:45",
        "2025-11-20 415-555 0132 9",  # a date next to figures is not a card grouping
        "Clause 4.2 (2025-11-20): 12 months",
        "index version 1.2.3, slide=5,table=1, build 1700000000",
        "see policy#3 and v2026-11-20 in std::vector or a :: b",
        "mac 00:1a:2b:3c:4d:5e, not an address 10.0.0.256",
    ],
)
def test_figures_versions_and_ids_survive(text: str) -> None:
    assert redact_text(text) == (text, Counter())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("from 192.168.1.10.", "from [IP]."),
        ("host 2001:db8::1 answered", "host [IP] answered"),
        ("[2001:db8::1]:8080", "[[IP]]:8080"),
        ("::1 and ::ffff:192.0.2.1", "[IP] and [IP]"),
        ("fe80::1:2:3:4:5:6 up", "[IP] up"),
    ],
)
def test_ip_addresses_are_redacted(text: str, expected: str) -> None:
    redacted, counts = redact_text(text)
    assert redacted == expected
    assert set(counts) == {"IP"}


def test_counts_per_kind_and_non_ascii_text_kept() -> None:
    text = (
        "Café crème: écrivez à josé@exemple.fr ou a@b.com, appelez +33 1 42 68 53 00 "
        "ou (415) 555-0132, carte 4111 1111 1111 1111, serveur 10.0.0.1 — 東京 2025年"
    )
    redacted, counts = redact_text(text)
    assert redacted == (
        "Café crème: écrivez à [EMAIL] ou [EMAIL], appelez [PHONE] "
        "ou [PHONE], carte [CARD], serveur [IP] — 東京 2025年"
    )
    assert counts == Counter(EMAIL=2, PHONE=2, CARD=1, IP=1)


def test_empty_text() -> None:
    assert redact_text("") == ("", Counter())


TRACE = {
    "request_id": "req-4155550132",
    "ts": "2026-11-20T10:00:00Z",
    "question": "I am jane@example.com, what is my limit?",
    "answer": {
        "claim": "Call (415) 555-0132. citations: [policy#3]",
        "citations": ["policy#3"],
        "claims": [
            {
                "claim_id": "c1",
                "text": "Card 4111 1111 1111 1111 is capped at 1702.0 USD.",
                "citation_id": "policy#3",
                "support_phrases": ["capped at 1702.0", "host 10.0.0.1"],
                "answer_point": "limit",
            }
        ],
    },
    "answer_json": {"claim": "write to jane@example.com", "citations": ["policy#3"]},
    "retrieved_ids": ["policy#3", "faq#12"],
    "selected_versions": ["2026-11-20", "2026-11-20"],
    "versions": {"index": "2026-11-20", "retriever": "1.2.3"},
    "tags": {"topic": "billing", "owner": "ops@example.com"},
    "latency_ms": 1702.0,
    "outcome": {
        "narrative_answer": "Reach us at 2001:db8::1 or +44 20 7946 0958.",
        "found_value": "1702.0",
        "found_source": {"doc": "policy", "locator": "slide=5,table=1"},
        "retrieved_context": [
            "policy text, contact bob@example.org",
            {"id": "faq#12", "text": "dial +1-415-555-0132", "score": 0.9},
        ],
    },
}


def test_trace_free_text_is_redacted_and_everything_else_kept() -> None:
    original = copy.deepcopy(TRACE)
    redacted, counts = redact_trace(TRACE)

    assert original == TRACE  # not mutated
    assert redacted["question"] == "I am [EMAIL], what is my limit?"
    assert redacted["answer"]["claim"] == "Call [PHONE]. citations: [policy#3]"
    claim = redacted["answer"]["claims"][0]
    assert claim["text"] == "Card [CARD] is capped at 1702.0 USD."
    assert claim["support_phrases"] == ["capped at 1702.0", "host [IP]"]
    assert redacted["answer_json"]["claim"] == "write to [EMAIL]"
    assert redacted["outcome"]["narrative_answer"] == "Reach us at [IP] or [PHONE]."
    assert redacted["outcome"]["retrieved_context"] == [
        "policy text, contact [EMAIL]",
        {"id": "faq#12", "text": "dial [PHONE]", "score": 0.9},
    ]
    assert counts == Counter(EMAIL=3, PHONE=3, CARD=1, IP=2)

    # Ids, citations, versions, tags, numbers and timestamps are not free text: copied as they are.
    untouched = [
        "request_id",
        "ts",
        "retrieved_ids",
        "selected_versions",
        "versions",
        "tags",
        "latency_ms",
    ]
    assert {k: redacted[k] for k in untouched} == {k: TRACE[k] for k in untouched}
    assert redacted["answer"]["citations"] == ["policy#3"]
    assert {k: v for k, v in claim.items() if k not in ("text", "support_phrases")} == {
        "claim_id": "c1",
        "citation_id": "policy#3",
        "answer_point": "limit",
    }
    assert redacted["outcome"]["found_source"] == TRACE["outcome"]["found_source"]
    assert redacted["outcome"]["found_value"] == "1702.0"


def test_returned_trace_shares_no_mutable_state_with_the_input() -> None:
    redacted, _ = redact_trace(TRACE)
    redacted["answer"]["claims"][0]["support_phrases"].append("x")
    redacted["tags"]["topic"] = "changed"
    assert TRACE["answer"]["claims"][0]["support_phrases"] == ["capped at 1702.0", "host 10.0.0.1"]
    assert TRACE["tags"]["topic"] == "billing"


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        (
            {"qid": "q1", "q": "mail a@b.com", "answer": "call (415) 555-0132"},
            ("mail [EMAIL]", "call [PHONE]"),
        ),
        ({"qid": "q1", "answer": None}, (None, None)),
        ({"qid": "q1"}, (None, None)),
    ],
)
def test_text_answers_q_alias_and_absent_fields(trace: dict, expected: tuple) -> None:
    redacted, _ = redact_trace(trace)
    assert (redacted.get("q"), redacted.get("answer")) == expected
    assert redacted["qid"] == "q1"
