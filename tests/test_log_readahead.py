"""An imported log is read and sieved blocks ahead of its parse (``cluster_source.SIEVES``,
#56): the batches, their ids and the file's account are what reading one block at a time
gives, whatever falls on a block's edge (a line cut by it, bytes that are not UTF-8, a line
longer than a block, a last line with no newline)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from telemetry.collect.logs import cluster_source
from telemetry.collect.logs.cluster_source import ClusterSource


def _log(path: Path) -> Path:
    out = []
    for it in range(1, 400):
        out.append(f" [2026-03-01 10:{it // 60:02d}:{it % 60:02d}] iteration {it:8d}/  500000 | "
                   "consumed samples: 4096 | learning rate: 3.0E-04 | lm loss: 2.5E+00 | grad "
                   "norm: 0.900 | number of nan iterations:   0 |")
        if it % 10 == 0:
            out += ["(min, max) time across ranks (ms):",
                    "    forward-backward ...............................: (5012.11, 5013.40)",
                    "    optimizer ......................................: (45.10, 46.21)"]
        if it == 123:
            out.append("NCCL WARN bad bytes \udcff\udcfe here")
        if it == 250:
            out.append("x" * 70_000)  # over a block here, and over the parser's line bound
        if it == 300:
            out.append("Traceback (most recent call last):\n  File \"train.py\", line 9\n"
                       "RuntimeError: CUDA error: an illegal memory access was encountered")
    text = "\n".join(out) + "\nthe last line, with no newline"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return path


def _batches(path: Path) -> list[Any]:
    source = ClusterSource(files=[str(path)], run="r")
    batches = list(source.poll(datetime(2026, 3, 2)))
    got = [(type(b).__name__, getattr(b, "batch_id", None), repr(getattr(b, "records", None)),
            repr(getattr(b, "tables", None))) for b in batches]
    points = sum(len(b.records["step"]) for b in batches if getattr(b, "kind", "") ==
                 "train_metrics")
    acc = source.logs[str(path)].account
    source.close()
    return [got, acc.lines, points, acc.unrecognised, acc.untimed_rank_perf, acc.untimed]


@pytest.mark.parametrize("sieves", [2, 3])
def test_reading_blocks_ahead_gives_what_one_block_at_a_time_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sieves: int) -> None:
    path = _log(tmp_path / "slurm-7.out")
    monkeypatch.setattr(cluster_source, "BLOCK_BYTES", 8192)  # dozens of blocks
    found = {}
    for n in (1, sieves):
        monkeypatch.setattr(cluster_source, "SIEVES", n)
        cluster_source._sieving.cache_clear()
        found[n] = _batches(path)
    cluster_source._sieving.cache_clear()
    one, ahead = found[1], found[sieves]
    assert len(one[0]) > 15 and one[2] > 300  # many blocks, the progress read
    assert ahead == one


def test_no_batch_queued_behind_a_failed_write_is_written(tmp_path: Path) -> None:
    """An import's writes are queued two deep (``daemon.IN_FLIGHT``); when one fails, the error
    is the import's and nothing queued behind it reaches the store."""
    import pandas as pd

    from telemetry.ingest.daemon import collect_overlapped
    from telemetry.ingest.seam import Records, Tables
    from telemetry.ingest.writer import StoreWriter
    from telemetry.store import Store

    now = datetime(2026, 3, 2)

    def runs(i: int) -> Records:
        return Records("runs", [{"run": f"run-{i}"}], "test", "test", f"b{i}")

    class Blocks:  # a source as the seam sees one: four batches, the second refused
        health_rows = False
        settled: list[str] = []

        def poll(self, _now: datetime) -> Any:
            yield runs(0)
            yield Tables({"no_such_table": pd.DataFrame({"x": [1]})}, now, 0, batch_id="bad")
            yield runs(2)
            yield runs(3)

        def settle(self, _now: datetime, batch: Any, _written: Any) -> None:
            self.settled.append(batch.batch_id)

    with Store(str(tmp_path / "s.duckdb")) as store:
        source = Blocks()
        with pytest.raises(ValueError, match="not appendable"):
            collect_overlapped(source, StoreWriter(store), now)
        stored = {r[0] for r in store.rows("SELECT run_id FROM runs")}
        ids = {r[0] for r in store.rows("SELECT batch_id FROM ingest_batches")}
    assert stored == {"run-0"} and ids == {"b0"} and source.settled == ["b0"]
