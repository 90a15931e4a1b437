"""Wilson intervals and slice aggregation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from ragspine_pipeline.scoring.slices import slices
from ragspine_pipeline.scoring.stats import wilson, wilson_interval


def test_wilson_known_values():
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)


def test_wilson_with_no_trials_is_the_whole_interval_not_nan():
    low, high = wilson_interval(np.array([0, 3]), np.array([0, 3]))
    assert low.tolist()[0] == 0.0 and high.tolist()[0] == 1.0
    assert not np.isnan(low).any() and not np.isnan(high).any()


def test_slices_per_tag_value_with_not_applicable_metrics_excluded():
    tags = pa.array(
        [[("workflow", "a"), ("topic", "x")], [("workflow", "a")], [("workflow", "b"), ("topic", "x")], []],
        pa.map_(pa.string(), pa.string()),
    )
    cases = pa.table(
        {
            "releasable": [True, False, True, True],
            "claim_faithfulness": pa.array([1.0, 0.5, None, 0.25]),
        }
    )
    result = {(s.dimension, s.value): s for s in slices(tags, cases, ["claim_faithfulness"])}
    assert set(result) == {("topic", "x"), ("workflow", "a"), ("workflow", "b")}
    a = result[("workflow", "a")]
    assert (a.n, a.releasable, a.releasable_rate) == (2, 1, 0.5)
    assert a.metrics["claim_faithfulness"] == 0.75 and a.metric_n["claim_faithfulness"] == 2
    b = result[("workflow", "b")]
    assert (
        b.metrics["claim_faithfulness"] is None and b.metric_n["claim_faithfulness"] == 0
    )  # not applicable, not NaN
    assert (b.ci_low, b.ci_high) == pytest.approx(wilson(1, 1))
