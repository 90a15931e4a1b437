"""The library-path yardstick of `bench_score.py`: the grounded flags of every case computed by one DuckDB
statement straight from the two files, and the per-case rows written by DuckDB.

    python bench/library_path.py GOLD TRACES OUT

It keeps none of the input rules `ragspine-eval score` keeps (no line guards, no JSON-type checks, no
refusal or short-snippet rules, no report): it measures what reading, joining and testing the files
costs with the library doing everything, the floor a scorer that keeps those rules stands on. It reads
the fields `bench_score.py`'s data uses, joins each case to the last trace naming it (``qid`` or its
``q_id`` alias), and prints recall@k over the answerable cases (k = 5) to show it joined the same
traces as the scorer.
"""

from __future__ import annotations

import sys

import duckdb


def main(gold: str, traces: str, out: str) -> None:
    db = duckdb.connect()
    db.execute(
        """
        CREATE TEMP TABLE cases AS
        WITH g AS (
            SELECT row_number() OVER () AS position, *
            FROM read_json(?, format = 'newline_delimited', columns = {
                qid: 'VARCHAR', answerable: 'BOOLEAN', gold_claim_substr: 'VARCHAR[]',
                gold_citations: 'VARCHAR[]'})
        ),
        t AS (
            SELECT row_number() OVER () AS row, coalesce(qid, q_id) AS key,
                   lower(answer_json.claim) AS claim, answer_json.citations AS citations, retrieved_ids
            FROM read_json(?, format = 'newline_delimited', columns = {
                qid: 'VARCHAR', q_id: 'VARCHAR', retrieved_ids: 'VARCHAR[]',
                answer_json: 'STRUCT(claim VARCHAR, citations VARCHAR[])'})
        ),
        last AS (SELECT * FROM t QUALIFY row = max(row) OVER (PARTITION BY key))
        SELECT g.position, g.qid, g.answerable,
            len(g.gold_claim_substr) = 0 OR coalesce(list_bool_or(
                [contains(last.claim, lower(s)) FOR s IN g.gold_claim_substr]), false) AS contained,
            coalesce(list_bool_or([coalesce(list_contains(last.citations, x), false)
                                   FOR x IN g.gold_citations]), false) AS cites_gold,
            coalesce(list_bool_and([coalesce(list_contains(last.retrieved_ids[1:5], x), false)
                                    FOR x IN g.gold_citations]), true) AS recalled
        FROM g LEFT JOIN last ON last.key = g.qid
        """,
        [gold, traces],
    )
    db.execute(
        "COPY (SELECT qid, contained, cites_gold, recalled FROM cases ORDER BY position) TO ? (FORMAT json)",
        [out],
    )
    [(recall,)] = db.execute("SELECT avg(recalled::INT) FROM cases WHERE answerable").fetchall()
    print(f"recall@k {recall:.4f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
