"""Two detection times (issue 57, 4): when the hardware failed and when the job noticed. A
Megatron-LM job's Slurm output and its node's kernel log, written as the software prints them
and imported with the user's command: node-b's GPU falls off the bus (XID 79) at ``XID``, 5 s
after the last progress; NCCL's watchdog fires on the ranks that waited 10 minutes later
(``WATCHDOG``) and Slurm cancels the job 20 s after that; the job restarts from step 1,000.
The stall the incident view draws ends at the job's noticing (was 5 s: the XID), the incident,
its Markdown, ``summary --json`` and the recovery's ``detection`` span tell both times, and a
stop whose job wrote no line about it says its noticing is unknown, never 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.metrics.recovery import recovery_spans
from telemetry.store import Store
from tests.conftest import bound_store, cli

RUN = "atlas-16"
T0 = datetime(2026, 11, 20, 2, 0, 0)
STEP_S, LAST_STEP = 2.0, 1400
LAST = T0 + timedelta(seconds=LAST_STEP * STEP_S)  # 02:46:40, the last progress line
XID = LAST + timedelta(seconds=5)  # 02:46:45: the kernel's NVRM line
WATCHDOG = XID + timedelta(minutes=10)  # 02:56:45: the first rank's watchdog timeout
CANCEL = WATCHDOG + timedelta(seconds=20)  # 02:57:05: Slurm cancels the job
LOAD = CANCEL + timedelta(minutes=8)  # the new attempt loads iteration 1,000 for 30 s
RESUMED = LOAD + timedelta(seconds=30)  # training resumed: step 1,001 (its line at 1,010)


def _iteration(t: datetime, step: int) -> str:
    return (f"[{t:%Y-%m-%d %H:%M:%S}] iteration {step:>8}/   20000 | consumed samples: "
            f"{step * 512:>10} | elapsed time per iteration (ms): {STEP_S * 1000:.1f} | learning "
            "rate: 3.000E-04 | global batch size:   512 | lm loss: 2.512345E+00 | loss scale: "
            "1.0 | grad norm: 0.912 | number of skipped iterations:   0 | number of nan "
            "iterations:   0 |")  # fmt: skip


def _job_log(watchdog: bool) -> str:
    out = ["using world size: 16, data-parallel size: 2, context-parallel size: 1, hierarchical "
           "context-parallel sizes: None, tensor-model-parallel size: 8, pipeline-model-parallel "
           "size: 1"]  # fmt: skip
    for step in range(10, LAST_STEP + 1, 10):
        t = T0 + timedelta(seconds=step * STEP_S)
        out.append(_iteration(t, step))
        if step == 1000:
            out += [f"[{t:%Y-%m-%d %H:%M:%S}] saving checkpoint at iteration    1000 to /lustre/ck",
                    f"[{t:%Y-%m-%d %H:%M:%S}]   successfully saved checkpoint from iteration    "
                    "1000 to /lustre/ck [ t 1/1, p 1/1 ]"]  # fmt: skip
    if watchdog:  # every rank but the failed GPU's (rank 11) times out in all-reduce
        out += [f"[rank{r}]:[E{WATCHDOG:%m%d %H:%M:%S}.{100 + r:06d} ProcessGroupNCCL.cpp:616] "
                f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4211, "
                "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
                "600021 milliseconds before timing out." for r in range(16) if r != 11]  # fmt: skip
    out += [f"slurmstepd: error: *** JOB 91234 ON node-a CANCELLED AT {CANCEL:%Y-%m-%dT%H:%M:%S}"
            " ***",
            f"[{LOAD:%Y-%m-%d %H:%M:%S}] loading checkpoint from /lustre/ck at iteration 1000",
            f"[{LOAD + timedelta(seconds=30):%Y-%m-%d %H:%M:%S}]  successfully loaded checkpoint "
            "from /lustre/ck [ t 1/1, p 1/1 ] at iteration 1000"]  # fmt: skip
    for step in range(1010, 1201, 10):
        out.append(_iteration(RESUMED + timedelta(seconds=(step - 1000) * STEP_S), step))
    return "\n".join(out) + "\n"


def build(root: Path, watchdog: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    log, kern = root / "slurm-91234.out", root / "node-b-kern.log"
    log.write_text(_job_log(watchdog))
    kern.write_text(
        f"{XID - timedelta(hours=1):%b %e %H:%M:%S} node-b kernel: [ 9000.100] eth0: link up\n"
        f"{XID:%b %e %H:%M:%S} node-b kernel: [12345.678] NVRM: Xid (PCI:0000:3b:00): 79, "
        "pid=4242, GPU has fallen off the bus.\n"
    )
    store = root / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, str(log), str(kern))
    assert r.returncode == 0, r.stderr
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("xid-watchdog"))


@pytest.fixture
def bound(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(store, monkeypatch)


def _stop(store: Path) -> dict:
    r = cli("summary", "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    (stop,) = run["interruptions"]["list"]
    return stop


def test_summary_json_tells_when_it_failed_and_when_the_job_noticed(store: Path) -> None:
    stop = _stop(store)
    assert stop["ts"] == LAST.isoformat() and stop["xid"] == 79
    assert stop["failed_at"] == XID.isoformat()  # the kernel's XID line
    assert stop["noticed_at"] == WATCHDOG.isoformat() + ".000100"  # rank 0's watchdog line
    assert stop["failed_unknown"] is None and stop["noticed_unknown"] is None
    assert stop["wait_s"] == pytest.approx(600.0, abs=1e-3)  # the 10 minutes to cut
    assert stop["stall_s"] == pytest.approx(605.0, abs=1e-3)  # was 5 s: the XID's
    assert stop["downtime_s"] == pytest.approx((RESUMED - LAST).total_seconds(), abs=1e-3)


def test_the_incident_stalls_until_the_job_noticed(bound: Store) -> None:
    from app.data import incident as data
    from app.figures import incident as fig

    inc = data.incident(RUN, LAST.isoformat())
    assert inc is not None
    spans = {label: (a, b) for label, a, b in inc["spans"]}
    a, b = spans["stalled until detected"]
    assert a == LAST and (b - WATCHDOG).total_seconds() == pytest.approx(100e-6)  # not XID
    assert spans["down until training resumed"] == (b, RESUMED)
    md = fig.markdown(inc)
    assert f"- **Failed:** {XID:%Y-%m-%d %H:%M:%S} UTC\n" in md
    assert (f"- **Job noticed:** {WATCHDOG:%Y-%m-%d %H:%M:%S} UTC (10.0 min after the failure, "
            "10.1 min after the last progress)\n") in md  # fmt: skip
    marks = [a["text"] for a in fig.timeline(inc).to_dict()["layout"].get("annotations", [])]
    assert "failed" in marks and "job noticed" in marks


def test_the_recovery_detection_span_is_the_same(store: Path) -> None:
    with Store(str(store), read_only=True) as s:
        (went,) = recovery_spans(s, RUN).values()
    first = went["spans"][0]
    assert first["name"] == "detection" and first["start"] == LAST.isoformat()
    assert first["end"] == _stop(store)["noticed_at"]


def test_a_stop_the_job_wrote_nothing_about_has_its_noticing_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The XID alone, then Slurm's cancel: when it failed is known, when the job noticed is
    not ("–" with why, never 0 s), and its downtime is still whole."""
    store = build(tmp_path, watchdog=False)
    stop = _stop(store)
    assert stop["failed_at"] == XID.isoformat() and stop["noticed_at"] is None
    assert "no line the job wrote dates its noticing" in stop["noticed_unknown"]
    assert stop["wait_s"] is None and stop["stall_s"] is None
    assert stop["downtime_s"] == pytest.approx((RESUMED - LAST).total_seconds(), abs=1e-3)
    from app.data import incident as data
    from app.figures import incident as fig

    for _ in bound_store(store, monkeypatch):
        inc = data.incident(RUN, LAST.isoformat())
        assert inc is not None
        assert [s[0] for s in inc["spans"]][:1] == ["down until training resumed"]
        assert inc["spans"][0][1:] == (LAST, RESUMED)  # from the last progress, no 0 s stall
        assert "- **Job noticed:** – (no line the job wrote dates its noticing" in fig.markdown(
            inc)
        break


def test_a_hang_fails_when_its_ranks_began_waiting_and_is_noticed_by_the_watchdog(
    tmp_path: Path,
) -> None:
    """The hang that died (``tests/hang_died_fixture.py``): it began when the waiting ranks
    enqueued the collective rank 9 never called (the flight recorder's time), and the job
    noticed it at its first watchdog line, 10 minutes later: as for any other stop."""
    from tests import hang_died_fixture as hd

    stop = _stop(hd.build(tmp_path / "hd"))
    assert stop["failed_at"] == hd.HANG_AT.isoformat()
    assert stop["noticed_at"] == hd.DETECTED.isoformat() + ".000100"  # rank 0's line
    assert stop["wait_s"] == pytest.approx(600.0, abs=1e-3)
