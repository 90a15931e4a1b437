"""The vectorised layered scorer agrees with the per-case oracle (tests/scoring/layered_oracle.py).

Random inputs are built to be mostly well-formed (a consistent first stage → rerank → selection pipeline
over a mostly permitted, current registry, with claims drawn from the chunk texts), then perturbed one or
two ways at a time, so that every stage of §3.2 — not only admissibility — is reached often.
"""

from __future__ import annotations

from unittest.mock import patch

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragspine_pipeline.contracts.columns import EVIDENCE_SCHEMA
from ragspine_pipeline.scoring import layered, rowwise
from ragspine_pipeline.scoring.admissibility import word_tokens
from ragspine_pipeline.scoring.layered import RATIO_METRICS, score_layered
from tests.scoring import layered_oracle as oracle
from tests.scoring.conftest import gold_table, trace_table

KNOWN = ["pol#1", "pol#2", "POL#1", "noise#1"]
GHOSTS = ["ghost#1", "ghost#2"]  # never in the registry
IDS = st.sampled_from(KNOWN + GHOSTS)
LIKELY = st.sampled_from([True] * 4 + [False])
MOSTLY = st.sampled_from([True] * 9 + [False])
VERSIONS = st.sampled_from(["v1", "v2"])
WORDS = st.sampled_from(
    ["release", "Release", "freeze", "manager", "approves", "x_1", "42", "é", "数据", "example.com", "-",
     "ΣΊΣΥΦΟΣ", "σίσυφος", "İstanbul"]  # Python's str.lower(): a final ς, İ as i and a combining dot
)  # fmt: skip
TEXT = st.lists(WORDS, max_size=6).map(" ".join)
REFUSALS = st.sampled_from(["not in context", " Not in Context \n", "NOT IN CONTEXT", "\tnot in context "])
NEAR_REFUSALS = st.sampled_from(["not in context.", "not  in context", "not in context\u00a0"])
BLANKS = st.sampled_from(["", " \t", "\n", None])
POINTS = st.sampled_from(["p1", "p2", "p3"])
QIDS = [f"q{i}" for i in range(6)]
HARNESS_KEYS = ["retriever", "index", "sparse", "dense", "fusion", "reranker"]  # the default required keys
GOOD_VERSION_KEYS = st.sampled_from([HARNESS_KEYS, ["embedder", *reversed(HARNESS_KEYS)]])
BAD_VERSION_KEYS = st.one_of(
    st.sampled_from([["index"], [], None, [*HARNESS_KEYS, "index"], ["retriever", "retriever"]]),
    st.lists(st.sampled_from([*HARNESS_KEYS, "embedder"]), max_size=7),
)
MUTATIONS = (
    "no first stage",
    "no rerank stages",
    "no reranked stage",
    "no selection",
    "repeat an id",
    "add an id",
    "drop an id",
)
VERSION_CHANGES = ("wrong version", "one version more", "one version less", "none")


def maybe(strategy):
    return st.one_of(st.none(), strategy)


def some_of(draw, values, keep=LIKELY):
    """An order-preserving random sub-list."""
    return [value for value in values if draw(keep)]


@st.composite
def registries(draw):
    chunk_ids = some_of(draw, KNOWN)  # sometimes empty: then every traced id is unknown
    return [
        {
            "chunk_id": chunk_id,
            "document_id": chunk_id.split("#")[0],
            "parent_id": None,
            "version": draw(VERSIONS),
            "permitted": draw(MOSTLY),
            "current": draw(MOSTLY),
            "text": draw(TEXT),
        }
        for chunk_id in chunk_ids
    ]


@st.composite
def gold_cases(draw, registry):
    known = [chunk["chunk_id"] for chunk in registry]
    qids = draw(st.lists(st.sampled_from(QIDS), min_size=1, max_size=6, unique=True))
    return [
        {
            "qid": qid,
            "answerable": draw(st.sampled_from([True, True, False])),
            "gold_citations": draw(
                st.lists(st.sampled_from(known if draw(LIKELY) and known else KNOWN + GHOSTS), max_size=3)
            ),
            "required_points": draw(st.lists(POINTS, max_size=3)),
        }
        for qid in qids
    ]


@st.composite
def claim_texts(draw, registry):
    """Mostly a run of words of some chunk's text (perhaps with a word added), else random words."""
    if not registry or draw(st.booleans()):
        return draw(TEXT)
    extra = draw(st.lists(WORDS, max_size=1))
    return " ".join([run_of_words(draw, draw(st.sampled_from(registry))["text"]), *extra])


def run_of_words(draw, text):
    """A run of consecutive words of ``text`` (perhaps empty)."""
    words = text.split(" ")
    start = draw(st.integers(0, len(words)))
    return " ".join(words[start : draw(st.integers(start, len(words)))])


@st.composite
def ledger_entries(draw, registry, selected):
    by_id = {chunk["chunk_id"]: chunk for chunk in registry}
    usable = [chunk_id for chunk_id in selected if chunk_id in by_id]
    if usable and draw(LIKELY):  # a claim drawn from a selected chunk, usually citing it
        chunk_id = draw(st.sampled_from(usable))
        text = by_id[chunk_id]["text"]
        return {
            "text": text if draw(LIKELY) else run_of_words(draw, text),
            "citation_id": chunk_id if draw(LIKELY) else draw(maybe(IDS)),
            # absent (the token rule), empty (vacuously met) or one phrase of the chunk
            "support_phrases": draw(st.sampled_from([None, []]))
            if draw(st.booleans())
            else [run_of_words(draw, text).upper()],
            "answer_point": draw(maybe(POINTS)),
        }
    phrases = draw(
        st.one_of(
            st.none(),
            st.just([]),
            st.lists(st.one_of(claim_texts(registry), WORDS), min_size=1, max_size=2),
        )
    )
    return {
        "text": draw(st.one_of(claim_texts(registry), st.just(None))) if draw(LIKELY) else None,
        "citation_id": draw(st.sampled_from(selected)) if selected and draw(LIKELY) else draw(maybe(IDS)),
        "support_phrases": phrases,
        "answer_point": draw(maybe(POINTS)),
    }


@st.composite
def answers(draw, registry, selected):
    """The answer fields of a trace: a claim ledger, a plain text answer, a refusal or nothing."""
    mode = draw(st.sampled_from(["ledger", "ledger", "text", "text", "refusal", "blank", "near refusal"]))
    cited = [draw(st.sampled_from(selected))] if selected and draw(LIKELY) else []
    if draw(LIKELY):  # usually a selected chunk first, perhaps more after it
        citations = cited + draw(st.lists(IDS, max_size=2))
    else:
        citations = draw(maybe(st.lists(IDS, max_size=2)))
    if mode == "ledger":
        claims = draw(st.lists(ledger_entries(registry, selected), max_size=3))
        claim = draw(st.one_of(st.just(" ".join(c["text"] or "" for c in claims)), BLANKS, REFUSALS))
        return {"claim": claim, "claims": claims, "citations": citations}
    if mode == "text":
        return {"claim": draw(claim_texts(registry)), "claims": None, "citations": citations}
    claims = draw(maybe(st.lists(ledger_entries(registry, selected), max_size=2)))
    claim = draw({"refusal": REFUSALS, "blank": BLANKS, "near refusal": NEAR_REFUSALS}[mode])
    return {"claim": claim, "claims": claims, "citations": citations}


@st.composite
def traces_for(draw, case, registry):
    """One trace for ``case``: a consistent pipeline over mostly known ids, then a few perturbations."""
    by_id = {chunk["chunk_id"]: chunk for chunk in registry}
    pool = sorted(by_id) if by_id and draw(LIKELY) else KNOWN + GHOSTS
    wanted = some_of(draw, case["gold_citations"])
    extra = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    first = draw(st.permutations(list(dict.fromkeys(wanted + extra))))
    rerank_in = some_of(draw, first) or first[:1]
    reranked = draw(st.permutations(rerank_in))
    selected = some_of(draw, reranked) or reranked[:1]
    stages = {
        "retrieved_ids": first,
        "rerank_input_ids": rerank_in,
        "reranked_ids": reranked,
        "selected_context_ids": selected,
    }
    mutations = draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=2)) if not draw(LIKELY) else []
    for mutation in mutations:
        if mutation == "no first stage":
            stages["retrieved_ids"] = None
        elif mutation == "no rerank stages":
            stages["rerank_input_ids"] = stages["reranked_ids"] = None
        elif mutation == "no reranked stage":
            stages["reranked_ids"] = None
        elif mutation == "no selection":
            stages["selected_context_ids"] = None
        elif mutation in ("repeat an id", "add an id", "drop an id"):
            name = draw(st.sampled_from(sorted(stages)))
            ids = list(stages[name] or [])
            if mutation == "repeat an id" and ids:
                ids.insert(draw(st.integers(0, len(ids))), draw(st.sampled_from(ids)))
            elif mutation == "add an id":
                ids.insert(draw(st.integers(0, len(ids))), draw(IDS))
            elif ids:
                del ids[draw(st.integers(0, len(ids) - 1))]
            stages[name] = ids
    shown = stages["selected_context_ids"]
    shown = stages["retrieved_ids"] if shown is None else shown
    versions = [by_id[i]["version"] if i in by_id else draw(VERSIONS) for i in shown or []]
    change = None if draw(LIKELY) else draw(st.sampled_from(VERSION_CHANGES))
    if change == "wrong version" and versions:
        at = draw(st.integers(0, len(versions) - 1))
        versions[at] = "v2" if versions[at] == "v1" else "v1"
    elif change == "one version more":
        versions.append(draw(VERSIONS))
    elif change == "one version less" and versions:
        versions.pop(draw(st.integers(0, len(versions) - 1)))
    elif change == "none" or (not versions and draw(st.booleans())):
        versions = None
    return {
        "qid": case["qid"],
        **stages,
        "selected_versions": versions,
        "version_keys": draw(GOOD_VERSION_KEYS if draw(LIKELY) else BAD_VERSION_KEYS),
        "index_version": None,
        **draw(answers(registry, shown or [])),
    }


@st.composite
def inputs(draw):
    registry = draw(registries())
    gold = draw(gold_cases(registry))
    traces = []
    for case in gold:
        copies = draw(st.sampled_from([1, 1, 1, 1, 1, 0, 2]))  # 0: a missing trace, 2: a duplicate
        traces += [draw(traces_for(case, registry)) for _ in range(copies)]
    if draw(st.integers(0, 4)) == 0:  # a trace for no gold case
        traces.append(draw(traces_for({"qid": "unmatched", "gold_citations": []}, registry)))
    if draw(st.booleans()):  # else gold order, which the join takes as the identity when it can
        traces = draw(st.permutations(traces))
    required_versions = draw(st.sampled_from([None, None, (), ("index",), ("index", "retriever")]))
    return gold, traces, registry, required_versions


def scored(gold, traces, registry, required_versions=None):
    evidence = pa.Table.from_pylist(registry, schema=EVIDENCE_SCHEMA)
    args = {} if required_versions is None else {"required_versions": required_versions}
    actual = score_layered(gold_table(gold), trace_table(traces), evidence, **args).cases.to_pylist()
    wanted = oracle.DEFAULT_REQUIRED_VERSIONS if required_versions is None else required_versions
    return actual, oracle.score(gold, traces, registry, wanted)


def assert_same(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        qid = want["qid"]
        assert got["qid"] == qid
        for name in ("admissible", "inadmissible", "answerable", "refused", "n_claims"):
            assert got[name] == want[name], (qid, name)
        assert got["first_failed_stage"] == want["first_failed_stage"], qid
        assert got["releasable"] == want["releasable"], qid
        for name in RATIO_METRICS:
            if want[name] is None:
                assert got[name] is None, (qid, name, got[name])
            else:
                assert got[name] == pytest.approx(want[name], rel=1e-12, abs=0), (qid, name)


@settings(max_examples=300, deadline=None)
@given(data=inputs(), chunk=st.sampled_from([1, 2, layered.CHUNK_ROWS]))
def test_vectorised_layered_scorer_matches_per_case_oracle(data, chunk):
    gold, traces, registry, required_versions = data
    with patch.object(layered, "CHUNK_ROWS", chunk):  # cases scored a few at a time, or all at once
        actual, expected = scored(gold, traces, registry, required_versions)
    assert_same(actual, expected)


# -- minimal cases that once disagreed with the layered definition ------------------------------------

CHUNK = {
    "chunk_id": "a",
    "document_id": "doc",
    "parent_id": None,
    "version": "v1",
    "permitted": True,
    "current": True,
    "text": "alpha beta",
}
ALPHA_CLAIM = {"text": "alpha", "citation_id": "a", "support_phrases": [], "answer_point": "p1"}
CLEAN = {  # an admissible trace selecting chunk "a", refused unless changed
    "qid": "q",
    "claim": "not in context",
    "citations": [],
    "retrieved_ids": ["a"],
    "selected_versions": ["v1"],
    "version_keys": HARNESS_KEYS,
}


def one_case(case, trace, registry=(CHUNK,)):
    gold = [{"qid": "q", **case}]
    actual, expected = scored(gold, [{**CLEAN, **trace}], list(registry))
    return actual[0], expected[0]


@pytest.mark.parametrize("citations", [None, []], ids=["no citation list", "empty citation list"])
def test_a_ledgerless_answer_without_citations_is_one_uncited_claim(citations):
    actual, expected = one_case({"answerable": True}, {"claim": "alpha", "citations": citations})
    assert expected["n_claims"] == 1 and expected["citation_coverage"] == 0.0
    assert expected["first_failed_stage"] == "citation support"
    assert_same([actual], [expected])


def test_an_empty_registry_makes_every_traced_id_unknown():
    actual, expected = one_case({"answerable": False}, {}, registry=())
    assert expected["inadmissible"] == ["unknown_chunk"]
    assert_same([actual], [expected])


@pytest.mark.parametrize(
    ("case", "trace", "metric", "value"),
    [
        ({"answerable": False, "gold_citations": ["a", "a", "b"]}, {}, "candidate_recall", 0.5),
        ({"answerable": False, "gold_citations": ["a", "a", "b"]}, {}, "context_recall", 0.5),
        (
            {"answerable": True, "required_points": ["p1", "p1", "p2"]},
            {"claim": "alpha", "claims": [ALPHA_CLAIM]},
            "point_coverage",
            0.5,
        ),
    ],
    ids=["candidate_recall", "context_recall", "point_coverage"],
)
def test_repeated_ids_and_points_count_once(case, trace, metric, value):
    actual, expected = one_case(case, trace)
    assert expected[metric] == value
    assert actual[metric] == pytest.approx(value)


def test_context_precision_counts_a_repeated_selected_id_each_time():
    # |selected ∩ required| = |{a}| = 1 over the selection's length, 3 (as the harness divides).
    trace = {"retrieved_ids": ["a", "a", "b"], "selected_versions": ["v1", "v1", "v1"]}
    actual, expected = one_case({"answerable": False, "gold_citations": ["a"]}, trace)
    assert expected["context_precision"] == 1 / 3
    assert actual["context_precision"] == pytest.approx(1 / 3)


# -- word tokens: split by bytes where the lower-cased text is ASCII, else by the regular expression ------

# ASCII (controls included), letters and digits that lower-case to ASCII or not at all, combining marks,
# other scripts' letters and digits, punctuation and symbols outside ASCII.
TOKEN_CHARS = st.one_of(
    st.characters(max_codepoint=127),
    st.sampled_from(list("\u212a\u0130\u1e9e\u00c9\u00e9\u0301\u0663\u00b2\u2167\u6570\u00a0\u2019\u3002_")),
    st.characters(codec="utf-8"),
)


def regex_word_tokens(texts: pa.Array) -> tuple[list, list]:
    values, rows = rowwise.flat(rowwise.word_tokens(texts))
    return values.to_pylist(), rows.tolist()


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.one_of(st.none(), st.text(TOKEN_CHARS, max_size=12)), max_size=8),
    start=st.integers(0, 2),
)
def test_word_tokens_are_those_of_the_regular_expression(texts, start):
    array = pa.array(["Sliced Off"] * start + texts, pa.string()).slice(start)  # also an offset array
    values, rows = word_tokens(array)
    assert (values.to_pylist(), rows.tolist()) == regex_word_tokens(array)


@pytest.mark.parametrize("code", range(128))
def test_each_ascii_character_joins_or_breaks_tokens_as_the_regular_expression_says(code):
    texts = pa.array([f"a{chr(code)}b", chr(code), f"{chr(code)}{chr(code)}x"], pa.string())
    values, rows = word_tokens(texts)
    assert (values.to_pylist(), rows.tolist()) == regex_word_tokens(texts)
