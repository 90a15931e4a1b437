"""The built-in reference RAG engine: the system under test that the pipeline replays questions against.

A small, deterministic, extractive retrieval-augmented QA service over a policy corpus (``corpus.jsonl``,
one chunk per line, read by :mod:`chunks`).

Pipeline, every stage recorded in the trace (the layered dialect):

1. **ACL** — with ``enforce_acl`` the chunks that are not ``permitted`` or not ``current`` are dropped
   before indexing, so they can never be retrieved; without it they leak into retrieval.
2. **First stage** — BM25 (k1=1.2, b=0.75) over the chunk text, top ``candidates`` (ties by chunk id).
3. **Rerank** — the first stage reordered by query-term coverage (idf-weighted share of the query's
   content terms found in the chunk's text or title) plus a title boost; ties by chunk id.
4. **Context** — from the first ``rerank_keep`` reranked chunks, up to ``context_size`` whose rerank score
   is at least ``context_cut`` × the best one (the best one always enters).
5. **Answer** — refuse (``not in context``) when the best chunk's coverage, the *normalised relevance*
   in [0, 1], is below ``min_relevance``; else extract the sentences of the selected chunks whose
   coverage is at least ``sentence_cut`` × the best sentence's (the best sentence of the top chunk
   always), one claim each, cited by its chunk and labelled with the sentence's answer point.
6. **Outcome** — :mod:`reference_outcome` turns that into the reply: figure questions are answered from
   the figures the selected chunks state (or clarified, or refused), and the trace gets its ``outcome``.

The same question, config and corpus always give the same trace, except ``ts``. Scoring is vectorised
over a dense term-document matrix built at load (the corpus is small; thousands of questions are cheap).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragspine_pipeline import inputs
from ragspine_pipeline.demo.chunks import Chunk, load_corpus
from ragspine_pipeline.demo.reference_outcome import Claim, decide, reference_day
from ragspine_pipeline.errors import InputError

K1, B = 1.2, 0.75
TITLE_BOOST = 0.15  # a chunk whose section title names the topic outranks a passing mention
SYSTEM_PROMPT_TOKENS = 180
TOKENS_PER_WORD = 1.3  # what a BPE tokenizer averages on English prose

# fmt: off
STOPWORDS = frozenset([
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "for", "from", "get",
    "gets", "got", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "long", "many",
    "me", "much", "must", "my", "need", "needs", "no", "of", "on", "or", "our", "should", "so", "some",
    "someone", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those",
    "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "whose", "why", "will", "with", "would", "you", "your",
])
# fmt: on

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords, plural endings folded (``expenses`` -> ``expense``)."""
    return [_fold(word) for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


def _fold(word: str) -> str:
    """A light suffix folding so that inflections meet: ``announces``, ``announced`` -> ``announc``."""
    if len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) > 4:
        word = _undouble(word[:-2])
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def _undouble(stem: str) -> str:
    """``submitt`` -> ``submit``, ``plann`` -> ``plan``; ``ll``, ``ss`` and ``zz`` stay (``install``)."""
    if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "aeiouylsz":
        return stem[:-1]
    return stem


def file_sha256(path: str | Path) -> str:
    """sha256 hex of a file's bytes (the index manifest's ``corpus_hash``)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# -- corpus and config -----------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineConfig:
    """How the engine retrieves and answers; stored in the index manifest under ``engine``."""

    candidates: int = 8  # first-stage top-n
    rerank_keep: int = 4  # reranked chunks eligible for the prompt
    context_size: int = 3  # chunks selected into the prompt
    min_relevance: float = 0.5  # refusal threshold on the best chunk's query coverage, in [0, 1]
    enforce_acl: bool = True  # drop restricted and stale chunks before retrieval
    retriever: str = "bm25-1.0"
    reranker: str = "coverage-1.0"
    context_cut: float = 0.45  # a chunk enters the prompt at this share of the best rerank score
    sentence_cut: float = 0.7  # a sentence becomes a claim at this share of the best sentence coverage

    def __post_init__(self) -> None:
        # A manifest is hand-editable JSON: "false" or 8.0 must not slip in as a truthy string or a float.
        for f in fields(self):
            value = getattr(self, f.name)
            wanted = {"int": int, "float": (int, float), "bool": bool, "str": str}[f.type]
            if not isinstance(value, wanted) or (f.type != "bool" and isinstance(value, bool)):
                raise ValueError(f"engine setting '{f.name}' must be a {f.type}, got {value!r}")
        if min(self.candidates, self.rerank_keep, self.context_size) < 1:
            raise ValueError("candidates, rerank_keep and context_size must be at least 1")
        for name in ("min_relevance", "context_cut", "sentence_cut"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        """The config of a manifest's ``engine`` mapping; unknown keys are a ValueError (a typo is not
        silently ignored), absent keys take their defaults."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown engine settings: {', '.join(unknown)}")
        return cls(**data)


# -- the engine ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Retrieval:
    """Everything about one question that does not depend on its id or time (cached per question)."""

    first_stage: tuple[int, ...]
    reranked: tuple[int, ...]
    selected: tuple[int, ...]
    relevance: float
    claims: tuple[int, ...]  # sentence rows, in answer order


class ReferenceEngine:
    """A deterministic extractive RAG service over a policy corpus (see the module docstring)."""

    _CACHE_LIMIT = 8192

    def __init__(self, chunks: list[Chunk], config: EngineConfig | None = None, index_version: str = "dev"):
        self._config = config or EngineConfig()
        self._index_version = index_version
        visible = [c for c in chunks if not self._config.enforce_acl or (c.permitted and c.current)]
        if not visible:
            raise ValueError("the corpus has no chunk the engine may retrieve")
        # Index order is chunk-id order, so a stable sort on score breaks ties by chunk id.
        self._chunks = sorted(visible, key=lambda c: c.chunk_id)
        self._filtered = len(chunks) - len(visible)
        self._build_index()
        self._cache: dict[str, _Retrieval] = {}

    @classmethod
    def from_manifest(cls, path: str | Path) -> ReferenceEngine:
        """The engine an index manifest describes: ``{"index_version", "corpus" (relative to the
        manifest's directory), "corpus_hash", "engine": {config}}``. A corpus whose sha256 differs from
        the manifest's ``corpus_hash`` is refused: that index was built from other content."""
        path = Path(path)
        try:
            if not path.exists():
                raise FileNotFoundError(path)
            manifest = inputs.load_json_file(path, "index manifest")
            corpus = path.parent / manifest["corpus"]
            config = EngineConfig.from_dict(manifest.get("engine") or {})
            index_version = str(manifest["index_version"])
        except FileNotFoundError:
            raise InputError(str(path), "index manifest not found") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(str(path), f"not a reference-engine index manifest: {exc}") from None
        if not corpus.is_file():
            raise InputError(str(path), f"the manifest's corpus '{corpus}' does not exist", field="corpus")
        expected = manifest.get("corpus_hash")
        if expected is not None and expected != file_sha256(corpus):
            raise InputError(str(path), f"'{corpus}' changed since index {index_version} was built")
        return cls(load_corpus(corpus), config, index_version)

    @property
    def index_version(self) -> str:
        return self._index_version

    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def visible_ids(self) -> list[str]:
        """Ids of the chunks the engine can retrieve (after the ACL filter), in chunk-id order."""
        return [c.chunk_id for c in self._chunks]

    def _build_index(self) -> None:
        chunks = self._chunks
        text_tokens = [tokenize(c.text) for c in chunks]
        title_tokens = [tokenize(c.title) for c in chunks]
        sentence_rows = [(i, s, p) for i, c in enumerate(chunks) for s, p in c.sentences]
        sentence_tokens = [tokenize(s) for _, s, _ in sentence_rows]
        vocab = sorted({t for toks in (*text_tokens, *title_tokens, *sentence_tokens) for t in toks})
        self._vocab = {term: col for col, term in enumerate(vocab)}
        n, v = len(chunks), len(vocab)

        tf = np.zeros((n, v))
        for i, toks in enumerate(text_tokens):
            np.add.at(tf[i], [self._vocab[t] for t in toks], 1.0)
        title = np.zeros((n, v), dtype=bool)
        for i, toks in enumerate(title_tokens):
            title[i, [self._vocab[t] for t in toks]] = True
        length = tf.sum(axis=1)
        df = (tf > 0).sum(axis=0)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = K1 * (1 - B + B * length / max(length.mean(), 1.0))
        self._bm25 = idf * tf * (K1 + 1) / (tf + norm[:, None])

        self._covers = (tf > 0) | title
        self._title = title
        # Coverage weights: idf over text and title; a word the corpus never uses weighs the most.
        df_cover = self._covers.sum(axis=0)
        self._weight = np.log1p((n - df_cover + 0.5) / (df_cover + 0.5))
        self._unseen_weight = float(np.log1p((n + 0.5) / 0.5))

        self._sentence_chunk = np.array([i for i, _, _ in sentence_rows], dtype=np.int64)
        self._sentence_text = [s for _, s, _ in sentence_rows]
        self._sentence_point = [p for _, _, p in sentence_rows]
        self._sentence_terms = np.zeros((len(sentence_rows), v), dtype=bool)
        for row, toks in enumerate(sentence_tokens):
            self._sentence_terms[row, [self._vocab[t] for t in toks]] = True
        self._words = np.array([len(c.text.split()) for c in chunks])

    # -- retrieval ---------------------------------------------------------------------------------

    def _retrieve(self, question: str) -> _Retrieval:
        cached = self._cache.get(question)
        if cached is not None:
            return cached
        cfg = self._config
        terms = list(dict.fromkeys(tokenize(question)))
        cols = np.array([self._vocab[t] for t in terms if t in self._vocab], dtype=np.int64)
        weights = self._weight[cols]
        total = float(weights.sum()) + self._unseen_weight * (len(terms) - len(cols))

        bm25 = self._bm25[:, cols].sum(axis=1)
        first = np.argsort(-bm25, kind="stable")[: cfg.candidates]
        coverage = self._share(self._covers[first][:, cols], weights, total)
        title = self._share(self._title[first][:, cols], weights, total)
        top_bm25 = float(bm25[first].max()) if len(first) else 0.0
        # The BM25 term only orders chunks of equal coverage; chunk id breaks any remaining tie.
        score = coverage + TITLE_BOOST * title + 1e-3 * (bm25[first] / top_bm25 if top_bm25 > 0 else 0.0)
        order = np.lexsort((first, -score))
        reranked, reranked_score = first[order], score[order]
        relevance = float(coverage[order[0]])

        keep = reranked[: cfg.rerank_keep]
        admitted = reranked_score[: cfg.rerank_keep] >= cfg.context_cut * reranked_score[0]
        selected = keep[admitted][: cfg.context_size]
        claims = () if relevance < cfg.min_relevance else self._extract(selected, cols, weights, total)
        result = _Retrieval(
            tuple(first.tolist()), tuple(reranked.tolist()), tuple(selected.tolist()), relevance, claims
        )
        if len(self._cache) < self._CACHE_LIMIT:
            self._cache[question] = result
        return result

    @staticmethod
    def _share(present: np.ndarray, weights: np.ndarray, total: float) -> np.ndarray:
        """Idf-weighted share of the query's content terms present, per row (0 for an empty query)."""
        if total <= 0:
            return np.zeros(len(present))
        return (present @ weights) / total

    def _extract(self, selected: np.ndarray, cols: np.ndarray, weights: np.ndarray, total: float):
        """Sentence rows of the selected chunks that answer the question, in context order."""
        rank = np.full(len(self._chunks), len(selected))
        rank[selected] = np.arange(len(selected))
        rows = np.flatnonzero(rank[self._sentence_chunk] < len(selected))
        rows = rows[np.argsort(rank[self._sentence_chunk[rows]], kind="stable")]
        share = self._share(self._sentence_terms[rows][:, cols], weights, total)
        in_top = self._sentence_chunk[rows] == selected[0]
        best_top = rows[in_top][np.argmax(share[in_top])]
        keep = ((share >= self._config.sentence_cut * share.max()) & (share > 0)) | (rows == best_top)
        return tuple(rows[keep].tolist())

    # -- the trace ---------------------------------------------------------------------------------

    def answer(
        self, qid: str, question: str, *, ts: float | str | None = None, reference_date: str | None = None
    ) -> dict[str, Any]:
        """One trace in the layered dialect, with its ``outcome`` (``ts`` defaults to now,
        ISO 8601 UTC; relative periods are resolved on ``reference_date``, by default the day of ``ts``)."""
        r = self._retrieve(question)
        ids = [c.chunk_id for c in self._chunks]
        first = [ids[i] for i in r.first_stage]
        selected = [ids[i] for i in r.selected]
        extracted = [
            Claim(self._sentence_text[j], ids[self._sentence_chunk[j]], self._sentence_point[j])
            for j in r.claims
        ]
        day = reference_day(reference_date, ts)
        reply = decide(
            question, [self._chunks[i] for i in r.selected], extracted, reference_date=day, terms=tokenize
        )
        claims, claim = reply.ledger(), reply.text
        context_words = int(self._words[list(r.selected)].sum())
        prompt = SYSTEM_PROMPT_TOKENS + _token_count(question) + round(context_words * TOKENS_PER_WORD)
        completion = _token_count(claim) + 8 * len(claims)
        return {
            "qid": qid,
            "question": question,
            "ts": ts if ts is not None else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "first_stage_ids": first,
            "rerank_input_ids": first,
            "reranked_ids": [ids[i] for i in r.reranked],
            "selected_context_ids": selected,
            "selected_versions": [self._chunks[i].version for i in r.selected],
            "versions": {
                "index": self._index_version,
                "retriever": self._config.retriever,
                "reranker": self._config.reranker,
            },
            "answer": {
                "claim": claim,
                "citations": list(dict.fromkeys(c["citation_id"] for c in claims)),
                "claims": claims,
            },
            "outcome": reply.outcome,
            "latency_ms": self._latency(qid, question, len(first), prompt, completion),
            "token_usage": {"prompt": prompt, "completion": completion},
            "acl": {"enforced": self._config.enforce_acl, "filtered": self._filtered},
        }

    @staticmethod
    def _latency(qid: str, question: str, n_candidates: int, prompt: int, completion: int) -> int:
        """Pseudo-latency: retrieval, reranking per candidate, prompt prefill, decoding per token, and
        up to 35 % jitter from a hash of the request (the same request always takes the same time)."""
        work = 60 + 9 * n_candidates + 0.4 * prompt + 11 * completion
        digest = hashlib.blake2b(f"{qid}\0{question}".encode(), digest_size=4).digest()
        jitter = int.from_bytes(digest, "big") / 0xFFFFFFFF
        return round(work * (1 + 0.35 * jitter))


def _token_count(text: str) -> int:
    """A model-tokenizer estimate from the word count."""
    return round(len(text.split()) * TOKENS_PER_WORD)
