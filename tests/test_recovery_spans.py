"""Where the recovery went (issue 58, 4): each incident cut into named spans, to the second, on
stores built with the real ``factoryfloor import`` of job logs whose times are known by
construction (``tests/cluster_fixture.py``: a night with two restarts; ``tests/
hang_died_fixture.py``: a hang that died); summed over the run they are goodput's recovery,
start-up, checkpoint-restore and wasted-progress seconds; a span the records do not date is
absent with why, never 0; the incident view, its Markdown and ``summary --json`` show them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.metrics.goodput import goodput
from telemetry.metrics.recovery import RECOVERY, recovery_spans
from telemetry.store import Store
from tests import cluster_fixture as night
from tests import hang_died_fixture as hd
from tests.conftest import bound_store, cli, imported_night

# the night's story (cluster_fixture.build): progress every 10 steps of 2 s from T0
LAST_1 = night.T0 + timedelta(seconds=3400 * night.STEP_S)  # step 3400: 09:53:20
WATCHDOG_1 = LAST_1 + timedelta(minutes=10)  # the job's first line: NCCL's watchdog
LOAD_1 = WATCHDOG_1 + timedelta(minutes=8)  # the new attempt's first line: its load, 40 s
RESUMED_1 = LOAD_1 + timedelta(seconds=60 + 10 * night.STEP_S)  # step 3010 after the load
LAST_2 = RESUMED_1 + timedelta(seconds=(5200 - 3010) * night.STEP_S)  # step 5200
IB_2 = LAST_2 + timedelta(seconds=15)  # the IB error the job itself logs, then exits
LOAD_2 = IB_2 + timedelta(minutes=6)  # 15 s
RESUMED_2 = LOAD_2 + timedelta(seconds=30 + 10 * night.STEP_S)  # step 5010
NO_START = ("the new attempt's process start is unknown (no Slurm record of the run's job "
            "starts between)")


def _table(went: dict) -> dict[str, list[tuple[str, float]]]:
    return {ts: [(s["name"], s["seconds"]) for s in v["spans"]] for ts, v in went.items()}


def _is_goodputs(went: dict, block: dict) -> None:
    """The spans of the run add up to goodput's recovery, start-up, restore and wasted progress
    (a warm-up's slow steps after training resumed, ``after_resume_s``, are goodput's
    slowdown, outside them)."""
    spans = [s for v in went.values() for s in v["spans"]]
    secs = block["seconds"]
    for cat in ("recovery", "checkpoint_restore", "wasted_progress"):
        mine = sum(s["seconds"] for s in spans if s["category"] == cat)
        # each span is rounded to the millisecond: a run of many stops sums their roundings
        assert mine == pytest.approx(secs[cat], abs=1e-3 * max(len(spans) / 2, 1)), (cat, secs)
    # the run's own start before its first step is goodput's start-up, no incident's
    total = sum(s["seconds"] for s in spans) + secs["startup"]
    four = sum(secs[k] for k in ("recovery", "startup", "checkpoint_restore", "wasted_progress"))
    assert total == pytest.approx(four, abs=1e-3 * max(len(spans) / 2, 1))


@pytest.fixture(scope="module")
def night_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_night(tmp_path_factory.mktemp("night"))


def test_the_nights_two_restarts_to_the_second(night_store: Path) -> None:
    with Store(str(night_store), read_only=True) as s:
        went = recovery_spans(s, night.RUN)
        block = goodput(s, night.RUN, detail=False)
    assert block is not None
    assert _table(went) == {
        LAST_1.isoformat(): [
            ("detection", (WATCHDOG_1 - LAST_1).total_seconds()),  # 600: the XID is the host's
            ("teardown", 0.0),  # srun's kill line is dated by the watchdog's, the line before
            ("rescheduling + start-up", (LOAD_1 - WATCHDOG_1).total_seconds()),  # 480
            ("checkpoint load", 40.0),
            # to the first redone step (its first line's 10 steps of 2 s ran after it): 20
            ("warm-up", (RESUMED_1 - LOAD_1).total_seconds() - 40.0 - 10 * night.STEP_S),
            ("redo", 400 * night.STEP_S),
        ],
        LAST_2.isoformat(): [
            ("detection", 15.0),
            ("teardown", 0.0),
            ("rescheduling + start-up", (LOAD_2 - IB_2).total_seconds()),  # 360
            ("checkpoint load", 15.0),
            ("warm-up", (RESUMED_2 - LOAD_2).total_seconds() - 15.0 - 10 * night.STEP_S),
            ("redo", 200 * night.STEP_S),
        ],
    }
    for v in went.values():  # the split between the two is unknown: each says why, no 0 s
        assert v["unknown"] == [{"name": "rescheduling", "reason": NO_START},
                                {"name": "start-up", "reason": NO_START}]  # fmt: skip
        warm = next(s for s in v["spans"] if s["name"] == "warm-up")
        assert warm["after_resume_s"] == 0.0  # its first steps ran at the ideal 2 s
    assert block["seconds"]["startup"] == 0.0  # the log's first line is a step
    _is_goodputs(went, block)


def test_a_hang_that_died_to_the_second(tmp_path: Path) -> None:
    store = hd.build(tmp_path / "hd", first_save=20)
    with Store(str(store), read_only=True) as s:
        went = recovery_spans(s, hd.RUN)
        block = goodput(s, hd.RUN, detail=False)
    assert block is not None
    (one,) = went.values()
    assert [(x["name"], x["seconds"]) for x in one["spans"]] == [
        ("detection", (hd.DETECTED - hd.LAST).total_seconds()),  # to the first watchdog line
        ("teardown", (hd.ENDED - hd.DETECTED).total_seconds()),  # to srun's kill
        ("lost steps", (hd.STEPS - 20) * 10.0),  # since the save at step 20, never redone
    ]
    never = {u["name"]: u["reason"] for u in one["unknown"]}
    assert set(never) == {"rescheduling", "start-up", "warm-up", "checkpoint load"}
    assert set(never.values()) == {"the run never resumed"}
    _is_goodputs(went, block)


def test_a_stop_known_from_dumps_alone_has_every_span_unknown_with_why(tmp_path: Path) -> None:
    """The hang's flight-recorder dumps without the job's log: when it stopped is known, not
    when the job noticed, exited or ended: no span, each named with why (never 0 s)."""
    store = hd.build(tmp_path / "hd", with_log=False)
    with Store(str(store), read_only=True) as s:
        (one,) = recovery_spans(s, hd.RUN).values()
    assert one["spans"] == []
    assert [u["name"] for u in one["unknown"]] == [
        "detection", "teardown", "rescheduling", "start-up", "warm-up", "checkpoint load", "redo"]
    assert all("the job's end is unknown" in u["reason"] for u in one["unknown"])


def test_summary_json_lists_each_interruptions_spans(night_store: Path) -> None:
    r = cli("summary", "--store", str(night_store), "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)["runs"][0]["interruptions"]["list"]
    with Store(str(night_store), read_only=True) as s:
        went = recovery_spans(s, night.RUN)
    assert [i["recovery_spans"] for i in listed] == [v["spans"] for v in went.values()]
    assert [i["recovery_unknown"] for i in listed] == [v["unknown"] for v in went.values()]


def test_the_incident_view_draws_and_writes_them(
    night_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.data import incident as data
    from app.figures import incident as fig

    gen = bound_store(night_store, monkeypatch)
    next(gen)
    try:
        inc = data.incident(night.RUN, LAST_1.isoformat())
    finally:
        gen.close()
    assert inc is not None
    rows = {t["name"] for t in fig.timeline(inc).to_dict()["data"]}
    assert {"recovery: detection", "recovery: rescheduling + start-up",
            "recovery: checkpoint load", "recovery: warm-up", "recovery: redo"} <= rows
    md = fig.markdown(inc)
    section = md.split("### Where the recovery went")[1]
    assert "- **detection:** 600 s (10.0 min) (2026-03-01 09:53:20 to 2026-03-01 10:03:20 UTC;" \
        in section
    assert "- **checkpoint load:** 40 s (2026-03-01 10:11:20 to 2026-03-01 10:12:00 UTC;" \
        in section
    assert "- **rescheduling:** unknown: the new attempt" in section  # why, never "0 s"
    assert "- **rescheduling:** 0" not in section


def test_slurm_dates_the_queue_wait_of_a_requeue(tmp_path: Path) -> None:
    """The night's job requeued after the XID (``sacct -D``: two records of job 81234, the
    second submitted at the exit and started 5 minutes later), read by the real Slurm parser
    and source from ``sacct``'s parsable text: rescheduling is the queue wait, start-up the
    new attempt's start to its first line, each to the second."""
    from telemetry.collect.slurm.slurm_client import SlurmClient, recorded_runner
    from telemetry.collect.slurm.slurm_source import SlurmSource
    from telemetry.ingest.daemon import collect
    from telemetry.ingest.writer import StoreWriter

    store = imported_night(tmp_path)
    began = WATCHDOG_1 + timedelta(minutes=5)  # the requeued job's start
    rec = tmp_path / "sacct"
    rec.mkdir()
    stamp = "%Y-%m-%dT%H:%M:%S"
    tres = "billing=64,cpu=64,gres/gpu=64,node=8"
    (rec / "sacct.txt").write_text(
        f"81234|81234|c1|sre|gpu|node-[0-7]|REQUEUED|None|0:0|{night.T0:{stamp}}|"
        f"{night.T0:{stamp}}|{WATCHDOG_1:{stamp}}|acct|{tres}|{night.RUN}\n"
        f"81234|81234|c1|sre|gpu|node-[0-6,8]|RUNNING|None|0:0|{WATCHDOG_1:{stamp}}|"
        f"{began:{stamp}}|Unknown|acct|{tres}|{night.RUN}\n"
    )
    with Store(str(store)) as s:
        src = SlurmSource(SlurmClient(mode="text", runner=recorded_runner(str(rec))),
                          since=night.T0, follow=False, run_from_job=f"^({night.RUN})$")
        collect(src, StoreWriter(s), RESUMED_2 + timedelta(hours=1))
        assert s.scalar("SELECT count(*) FROM slurm_jobs WHERE run_id = ?", [night.RUN]) == 2
        went = recovery_spans(s, night.RUN)
        block = goodput(s, night.RUN, detail=False)
    assert block is not None
    first = went[LAST_1.isoformat()]
    assert [(x["name"], x["seconds"]) for x in first["spans"]][2:4] == [
        ("rescheduling", 300.0), ("start-up", (LOAD_1 - began).total_seconds())]  # 180 s
    assert first["unknown"] == []
    second = went[LAST_2.isoformat()]  # no job started between: still unknown, with why
    assert {u["name"] for u in second["unknown"]} == {"rescheduling", "start-up"}
    _is_goodputs(went, block)


def test_a_replayed_runs_spans_add_up_to_its_goodput(tmp_path: Path) -> None:
    """A replayed run's stops carry their detection and restart times but no lines: each is
    its detection (the record's ``detect_s``: when the job noticed, as every view tells it)
    and one span named for all the rest holds (none claimed as 0 s), redone after it resumed;
    the run's spans are its goodput's recovery and wasted progress."""
    from tests.conftest import build_store

    path = build_store(tmp_path / "s.duckdb", scenario="dev-64", seed=0, days=1.0)
    with Store(str(path), read_only=True) as s:
        block = goodput(s, "dev-64-s0", detail=False)
        went = recovery_spans(s, "dev-64-s0", block)
    assert block is not None and len(went) >= 3
    with Store(str(path), read_only=True) as s:
        detect = dict(s.rows("SELECT ts, detect_s FROM interruptions WHERE run_id = ?",
                             ["dev-64-s0"]))  # fmt: skip
    for ts, v in went.items():
        first = v["spans"][0]
        assert first["name"] == "detection"  # was merged into the rest: now the record's
        assert first["seconds"] == pytest.approx(detect[datetime.fromisoformat(ts)], abs=1e-3)
        assert v["spans"][1]["name"] == "teardown + rescheduling + start-up + warm-up"
        assert v["spans"][-1]["name"] == "redo"
        assert {u["name"] for u in v["unknown"]} == {*RECOVERY[1:], "checkpoint load"}
    _is_goodputs(went, block)
