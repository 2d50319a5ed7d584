"""A run that hung and died costs what it lost, on every page and in ``summary --json`` (issue
57, 3): its 16 GPUs waiting for the watchdog, the seconds they were held after it, and every
step since its start (it saved no checkpoint). A figure nobody knows is null, never 0; a job
known from its logs gets the state its log's end tells (issue 57, 5). Stores are built with the
user's ``import`` (``tests/hang_died_fixture.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.queries import TimeRange
from telemetry.queries import failures as failq
from telemetry.store import Store
from tests import hang_died_fixture as hd
from tests.conftest import bound_store, cli

# By construction: the watchdog line 605 s after the last progress (it carries its rank's
# microseconds: rank 0's is the first), Slurm's kill 20 s later, 60 steps of 10 s redone.
WAIT_S = (hd.DETECTED - hd.LAST).total_seconds() + 100e-6
HELD_S = (hd.ENDED - hd.DETECTED).total_seconds() - 100e-6
LOST_GH = 16 * (WAIT_S + HELD_S + 60 * 10.0) / 3600.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hd.build(tmp_path_factory.mktemp("hang-died"))


def _summary(store: Path) -> dict:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_hung_and_died_run_is_never_free(store: Path) -> None:
    out = _summary(store)
    (run,) = out["runs"]
    assert run["goodput"]["goodput"] == 0.0  # nothing it did was kept (was 1.0)
    secs = run["goodput"]["seconds"]
    assert secs["wasted_progress"] == 590.0  # 59 timed steps of 10 s
    assert secs["recovery"] == pytest.approx(WAIT_S + HELD_S, abs=1e-3)
    assert run["lost_gpu_hours"] == pytest.approx(LOST_GH, abs=1e-3)
    assert run["cost"]["lost_usd"] == pytest.approx(LOST_GH * 2.0, abs=0.01)
    assert run["interruptions"]["lost_steps"] == 60
    (stop,) = run["interruptions"]["list"]
    assert stop["lost_steps"] == 60
    assert stop["downtime_s"] == pytest.approx(WAIT_S + HELD_S, abs=1e-3)
    with Store(str(store), read_only=True) as s:  # the Failures page's figures: the same
        rel = failq.reliability(s, hd.RUN, TimeRange(hd.T0, hd.ENDED + timedelta(hours=1)))
    assert rel["lost_gpu_hours"] == pytest.approx(LOST_GH, abs=1e-6)
    assert rel["lost_steps"] == 60


def test_a_save_before_the_hang_is_where_the_loss_starts(tmp_path: Path) -> None:
    store = hd.build(tmp_path, first_save=40)
    (run,) = _summary(store)["runs"]
    (stop,) = run["interruptions"]["list"]
    assert stop["lost_steps"] == 20, stop["description"]
    assert run["lost_gpu_hours"] == pytest.approx(16 * (WAIT_S + HELD_S + 200) / 3600, abs=1e-3)


def test_unknown_lost_steps_are_null_not_zero(tmp_path: Path) -> None:
    """A job known from its failure lines only: nobody knows its steps."""
    log = tmp_path / "slurm-7.out"
    log.write_text(
        "[rank3]:[E1120 02:19:55.000100 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=61, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
        "[2026-11-20 02:20:15] srun: error: gpu-b: task 1: Killed\n"
    )
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "lines", str(log))
    assert r.returncode == 0, r.stderr
    (run,) = _summary(store)["runs"]
    assert run["interruptions"]["unexpected"] == 1
    assert run["interruptions"]["lost_steps"] is None  # was 0
    with Store(str(store), read_only=True) as s:
        day = TimeRange(datetime(2026, 11, 20), datetime(2026, 11, 21))
        rel = failq.reliability(s, "lines", day)
    assert rel["unexpected"] == 1 and rel["lost_steps"] is None  # was 0


def test_a_hang_known_from_its_dumps_alone_is_a_stop_of_unknown_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No line dates its detection and no step is known: counted, its culprit the dumps',
    its cost "–" with why, never $0 by omission and never left out."""
    store = hd.build(tmp_path, with_log=False)
    (run,) = _summary(store)["runs"]
    assert run["interruptions"]["unexpected"] == 1  # was 0: the hang was no stop
    assert run["state"] == "stopped"
    (stop,) = run["interruptions"]["list"]
    assert stop["rank"] == hd.CULPRIT and stop["lost_gpu_hours"] is None
    assert run["lost_gpu_hours"] is None and run["interruptions"]["lost_steps"] is None
    from app.data import incident as data
    from app.figures import incident as fig

    for _ in bound_store(store, monkeypatch):
        inc = data.hang(hd.RUN, hd.HANG_AT.isoformat())["interruption"]
        assert inc is not None and inc["rank"] == hd.CULPRIT
        assert fig.lost(inc) == ("steps – · time down – (no line dates its detection) · "
                                 "GPU-hours – (no line dates its detection, and its steps are "
                                 "not known)")  # fmt: skip
        break


def test_jobs_from_logs_get_the_state_their_end_tells(store: Path, tmp_path: Path) -> None:
    log = tmp_path / "done.log"
    t0 = datetime(2026, 11, 20, 3, 0, 0)
    lines = [f"[rank0]:[titan] {t0 + timedelta(seconds=10 * i):%Y-%m-%d %H:%M:%S},000 - root - "
             f"INFO - step: {i + 1}  loss:  7.{i:02d}  memory: 33.12GiB(41.86%)  tps: 6,123"
             for i in range(30)]  # fmt: skip
    lines.append(f"[rank0]:[titan] {t0 + timedelta(seconds=300):%Y-%m-%d %H:%M:%S},000 - root "
                 "- INFO - Training completed")  # fmt: skip
    log.write_text("\n".join(lines) + "\n")
    mine = tmp_path / "s.duckdb"
    mine.write_bytes(store.read_bytes())
    r = cli("import", "--store", str(mine), "--run", "done", str(log))
    assert r.returncode == 0, r.stderr
    jobs = {j["job_id"]: j for j in _summary(mine)["jobs"]}
    assert jobs[hd.RUN]["state"] == "FAILED"  # was RUNNING
    assert jobs[hd.RUN]["end"] == hd.ENDED.isoformat()  # its last line, Slurm's kill
    assert jobs["done"]["state"] == "COMPLETED"  # was RUNNING


@pytest.fixture
def bound(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(store, monkeypatch)


def test_the_hang_opens_with_its_stop_told_whole(bound: Store) -> None:
    from app.data import incident as data
    from app.figures import incident as fig

    h = data.hang(hd.RUN, hd.HANG_AT.isoformat())
    assert h is not None
    inc = h["interruption"]  # was absent: no timeline, no loss, no evidence
    assert inc is not None and inc["hangs"][0]["seq_id"] == 61
    labels = [s[0] for s in inc["spans"]]
    assert labels == ["steps since the last checkpoint, lost", "stalled until detected",
                      "held until the job ended"]  # fmt: skip
    assert inc["ended"] == hd.ENDED and inc["resumed"] is None
    assert len(inc["evidence"]) >= 15  # the dumps' cause and the ranks' watchdog lines
    lost = fig.lost(inc)
    down = (hd.ENDED - hd.LAST).total_seconds() / 60
    assert lost.startswith(f"60 steps · {down:.1f} min down · {LOST_GH:.1f} GPU-hours, "
                           f"${LOST_GH * 2:,.2f}"), lost  # fmt: skip
    md = fig.markdown(inc)
    assert f"job ended {hd.ENDED:%Y-%m-%d %H:%M:%S} UTC; training never resumed" in md
    assert "- **Job:** – (no Slurm job known); attempt 0" in md
    assert "- **GPU:** no GPU named by the evidence; the run: 16 × GPU (model not known)" in md
    assert "- **Run's final state:** stopped" in md
    assert ("- **The run's total:** 1 unexpected, 0 planned interruptions; "
            f"{LOST_GH:.1f} GPU-hours lost, ${LOST_GH * 2:,.2f}") in md


def test_job_cards_say_unknown_as_the_rows_do(bound: Store) -> None:
    from app.main import create_app

    create_app(bound)
    from app.pages import jobs as page

    view = {"run": hd.RUN, "range": "custom", "start": "2026-11-20T01:00:00",
            "end": "2026-11-20T04:00:00"}  # fmt: skip
    _grid, cards = page.grid_for(view, {})
    text = str(cards)
    assert "Used" in text and "0.0 GPU-h" not in text and "0 % of allocated" not in text
    assert "– (no GPU samples of these jobs" in text
