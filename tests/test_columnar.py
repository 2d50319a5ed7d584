"""Training metrics validated column-wise (``ingest.columnar``, how a log's progress points are
stored) say the same as the records policy row by row: same rows kept with the same values,
same rows rejected with the same reasons."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd

from telemetry.ingest.columnar import validate_columns
from telemetry.ingest.records import validate

NOW = datetime(2026, 3, 2, 12, 0)
T = datetime(2026, 3, 1, 8, 0)

ROWS = [  # (run, ts, step, tokens, loss, lr, grad_norm, tokens_per_s, mfu)
    ("atlas", T, 10, 40960.0, 2.5, 3e-4, 0.9, 6123.0, 0.41),
    ("atlas", T + timedelta(seconds=2), 20, None, 2.4, None, None, None, None),
    ("atlas", T, -1, None, 2.4, None, None, None, None),  # negative step
    ("atlas", T, 30, None, None, None, None, None, None),  # no metric
    ("atlas", T, 40, None, 1e39, None, None, None, None),  # beyond float32
    ("atlas", T, 50, None, 2.0, -1e-4, None, None, None),  # negative lr
    ("atlas", T, 60, None, 2.0, None, None, None, 1.5),  # mfu above 1
    ("atlas", T, 70.5, None, 2.0, None, None, None, None),  # fractional step
    ("atlas", datetime(1999, 1, 1), 80, None, 2.0, None, None, None, None),  # too early
    ("atlas", NOW + timedelta(days=2), 90, None, 2.0, None, None, None, None),  # future
    ("atlas", None, 100, None, 2.0, None, None, None, None),  # no time: stamped now
    ("atlas", T, None, None, 2.0, None, None, None, None),  # no step
    ("atlas", T, 2**63, None, 2.0, None, None, None, None),  # step out of range
    ("at\u202elas", T, 110, None, 2.0, None, None, None, None),  # a bidi override in the run
    ("atlas", T, 120, None, float("inf"), None, None, None, None),  # not finite
    ("atlas", T, 130.0, 5, 2.0, None, None, None, None),  # integral float step, int tokens
]
NAMES = ("run", "ts", "step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu")


def test_columns_and_records_agree() -> None:
    records = [
        {k: (v.isoformat() if isinstance(v, datetime) else v)
         for k, v in zip(NAMES, row, strict=True) if v is not None}
        for row in ROWS
    ]  # fmt: skip
    by_row = validate("train_metrics", records, NOW)
    columns = {k: [row[i] for row in ROWS] for i, k in enumerate(NAMES)}
    by_column = validate_columns(columns, NOW)
    assert [(r.index, r.reason) for r in by_column.rejected] == [
        (r.index, r.reason) for r in by_row.rejected
    ]
    assert len(by_column.rejected) == 12
    pd.testing.assert_frame_equal(by_column.frame, by_row.frame, check_dtype=True)
