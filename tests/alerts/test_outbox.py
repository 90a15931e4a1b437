"""The outbox: every alert persisted before delivery, de-duplication per stream (on both stores), corrupt
lines set aside."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor

from ragspine_pipeline.alerts.builders import release_alert, run_failure_alert
from ragspine_pipeline.alerts.events import AlertOutbox
from ragspine_pipeline.alerts.outbox import Outbox
from ragspine_pipeline.decision.release import ReleaseDecision

STREAM = "release:golden"


def decision(
    index: str = "ix-1", gates: tuple[str, ...] = ("recall@k",), slices: tuple[str, ...] = ()
) -> ReleaseDecision:
    return ReleaseDecision.model_validate(
        {
            "decision": "block" if gates or slices else "ship",
            "index_version": index,
            "golden_version": "g-1",
            "run_id": f"run-{index}-{len(gates)}",
            "failed_gates": [
                {"metric": m, "value": 0.5, "op": ">=", "threshold": 0.9, "delta": -0.4, "severity": "hard"}
                for m in gates
            ],
            "failed_slices": [
                {"dimension": "workflow", "value": v, "n": 12, "releasable_rate": 0.5, "min_rate": 0.75}
                for v in slices
            ],
            "regressions": [],
        }
    )


def observe(outbox: AlertOutbox, **kwargs) -> bool:
    return outbox.observe(release_alert(decision(**kwargs), STREAM)) is not None


def test_the_same_regression_is_announced_once(outbox):
    assert observe(outbox)
    assert not observe(outbox)
    assert len(outbox.read().pending) == 1


def test_a_new_failure_or_a_new_failing_index_is_announced_again(outbox):
    assert observe(outbox, gates=("recall@k",))
    assert observe(outbox, gates=("recall@k", "precision"))  # precision is new
    assert not observe(outbox, gates=("precision",))  # fewer failures: nothing new to say ...
    assert observe(outbox, gates=("precision", "recall@k"))  # ... until recall@k fails again
    assert observe(outbox, index="ix-2", gates=("precision",))  # a new index version that fails
    assert observe(outbox, index="ix-2", gates=("precision",), slices=("expenses",))  # a failing slice


def test_a_recovery_is_announced_once_and_only_after_a_failure(outbox):
    assert not observe(outbox, gates=())  # shipping from the start: nothing to recover from
    assert observe(outbox, gates=("recall@k",))
    assert observe(outbox, gates=())
    assert not observe(outbox, gates=())
    kinds = [entry.alert.kind for entry in outbox.read().entries]
    assert kinds == ["regression", "recovered"]
    assert observe(outbox, gates=("recall@k",))  # failing again after the recovery is news


def test_every_failed_run_is_its_own_stream(outbox):
    first = run_failure_alert("reeval_on_index_rebuild", "run-1", "golden_traces", "SUT down")
    assert outbox.observe(first) is not None
    assert outbox.observe(run_failure_alert("reeval_on_index_rebuild", "run-1", "golden_traces", "x")) is None
    assert outbox.observe(run_failure_alert("nightly_eval", "run-2", None, "boom")) is not None


def test_a_corrupt_line_is_set_aside_and_does_not_block_new_alerts(tmp_path):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    assert observe(outbox)
    with open(outbox.path, "a") as out:
        out.write('{"event": "queued", "alert": {"kind": "nonsense"}}\n')
        out.write("not json at all\n")
        out.write('{"event": "delivered", "id": "no-such-alert"}\n')
        out.write('{"event": "queued", "alert": {"id": "half a li')  # a crash mid-write: no newline
    assert observe(outbox, index="ix-2")  # appended on a line of its own, after the torn one
    view = outbox.read()
    assert view.set_aside == 4
    assert [e.alert.index_version for e in view.pending] == ["ix-1", "ix-2"]
    aside = [json.loads(line) for line in outbox.corrupt_path.read_text().splitlines()]
    assert [a["line"] for a in aside] == [2, 3, 4, 5] and all(a["error"] for a in aside)
    assert outbox.read().set_aside == 0  # set aside once, not reported again


def test_an_unreadable_state_file_costs_one_repeat_at_most(tmp_path):
    outbox = Outbox(tmp_path / "outbox.jsonl")
    assert observe(outbox)
    outbox.state_path.write_text("{ broken")
    # State lost: taken again from the queued event that carries it, so not even one repeat ...
    assert not observe(outbox)
    assert not observe(outbox)  # ... and remembered again
    assert outbox.state_path.with_suffix(".corrupt.json").exists()


def _observe_in_another_process(path: str) -> bool:
    return observe(Outbox(path))


def test_concurrent_processes_announce_a_regression_exactly_once(tmp_path):
    path = str(tmp_path / "outbox.jsonl")
    with ProcessPoolExecutor(4) as pool:
        announced = list(pool.map(_observe_in_another_process, [path] * 8))
    assert announced.count(True) == 1
    assert len(Outbox(path).read().entries) == 1
