"""Importing training logs: JSONL, CSV and real TensorBoard event files, as readers and through
the ``factoryfloor import`` command."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from tensorboardX import SummaryWriter

from telemetry import queries
from telemetry.collect.logs.importers import ImportFileError, read_csv, read_jsonl, read_tensorboard
from telemetry.store import Store
from tests.conftest import cli

pytestmark = pytest.mark.live  # real servers, daemons, jobs or the CLI: run one at a time

WALL0 = 1_795_000_000.0  # unix seconds
TS0 = datetime(1970, 1, 1) + timedelta(seconds=WALL0)  # the same, naive UTC


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def metrics_jsonl(path: Path, steps: int = 50) -> Path:
    return write_jsonl(
        path,
        [
            json.dumps({"run": "job-1", "step": s, "ts": WALL0 + 10 * s, "loss": 5.0 - s / 100})
            for s in range(steps)
        ],
    )


def tensorboard_log(logdir: Path) -> Path:
    """A real event file: mapped and unmapped scalars, a histogram, text, and a restart."""
    w = SummaryWriter(str(logdir))
    for step in range(0, 30):
        wall = WALL0 + 10 * step
        w.add_scalar("train/loss", 4.0 - step / 100, step, walltime=wall)
        w.add_scalar("train/learning_rate", 3e-4, step, walltime=wall)
        w.add_scalar("eval/accuracy", 0.5, step, walltime=wall)
    w.add_histogram("weights", np.arange(10.0), 29, walltime=WALL0 + 290)
    w.add_text("notes", "restarting from step 20", 29, walltime=WALL0 + 295)
    for step in range(20, 25):  # restarted from the step-20 checkpoint
        w.add_scalar("train/loss", 3.9, step, walltime=WALL0 + 600 + 10 * step)
    w.close()
    return logdir


def store_loss(path: Path, run: str) -> list[float]:
    with Store(str(path), read_only=True) as s:
        ext = queries.data_extent(s)
        assert ext is not None
        return list(queries.train_series(s, run, ext)["loss"])


# -- readers -----------------------------------------------------------------------------------
def test_jsonl_reads_objects_and_reports_torn_lines_by_line(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "m.jsonl", ['{"run": "a", "step": 1}', "", "[1, 2]", '{"run": "a'])
    log = read_jsonl(p)
    assert log.records == [{"run": "a", "step": 1}, [1, 2]]
    assert log.origins == [f"{p}:1", f"{p}:3"]
    assert [b.origin for b in log.bad_lines] == [f"{p}:4"]
    assert "not JSON" in log.bad_lines[0].reason


def test_a_json_file_may_hold_one_array(tmp_path: Path) -> None:
    p = tmp_path / "m.json"
    p.write_text(json.dumps([{"run": "a", "step": 1}, {"run": "a", "step": 2}]))
    assert [r["step"] for r in read_jsonl(p).records] == [1, 2]
    p.write_text('[{"run": "a"')
    with pytest.raises(ImportFileError, match="m.json: not a JSON array"):
        read_jsonl(p)


def test_csv_cells_become_the_json_types_of_their_fields(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text(
        "run,step,ts,loss,planned,description\n"
        "123,7,2026-11-18T10:00:00Z,2.5,true,a\n"
        '123,8,1795000000,,false,"quoted, text"\n'
        "123,x9,,1.0,,\n"
    )
    log = read_csv(p)
    assert log.records[0] == {"run": "123", "step": 7, "ts": "2026-11-18T10:00:00Z"} | {
        "loss": 2.5,
        "planned": True,
        "description": "a",
    }
    assert log.records[1] == {"run": "123", "step": 8, "ts": 1795000000, "planned": False} | {
        "description": "quoted, text"
    }
    assert log.records[2]["step"] == "x9"  # left as text: validation names the field
    assert log.origins[1] == f"{p}:3"


def test_csv_rows_longer_than_the_header_are_bad_lines(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    p.write_text("run,step,loss\na,1,2.0\na,2,2.0,extra\n")
    log = read_csv(p)
    assert len(log.records) == 1 and log.bad_lines[0].origin == f"{p}:3"
    p.write_text("")
    with pytest.raises(ImportFileError, match="m.csv: empty file"):
        read_csv(p)


def test_tensorboard_scalars_map_to_metrics_and_restarts_to_attempts(tmp_path: Path) -> None:
    logdir = tensorboard_log(tmp_path / "tb")
    log = read_tensorboard(logdir, "job-1")
    first = log.records[0]
    assert first == {"run": "job-1", "step": 0, "ts": WALL0, "attempt": 0} | {
        "loss": pytest.approx(4.0),
        "lr": pytest.approx(3e-4),
    }
    assert len(log.records) == 30 + 5
    rerun = [r for r in log.records if r["attempt"] == 1]
    assert [r["step"] for r in rerun] == [20, 21, 22, 23, 24]
    assert rerun[0]["ts"] == WALL0 + 800 and "lr" not in rerun[0]
    assert log.ignored_tags == {"eval/accuracy": 30, "weights": 1, "notes/text_summary": 1}


def test_tensorboard_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(ImportFileError, match="no events.out.tfevents"):
        read_tensorboard(tmp_path, "r")
    junk = tmp_path / "events.out.tfevents.1.host"
    junk.write_bytes(b"not a record file" * 10)
    with pytest.raises(ImportFileError, match=r"events\.out\.tfevents\.1\.host: no TensorBoard"):
        read_tensorboard(junk, "r")


# -- the command -------------------------------------------------------------------------------
def test_import_jsonl_then_again_is_a_no_op(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    log = metrics_jsonl(tmp_path / "m.jsonl")
    r = cli("import", "--store", str(store), str(log))
    assert r.returncode == 0, r.stderr
    assert "50 train_metrics records stored, 0 rejected" in r.stdout
    again = cli("import", "--store", str(store), str(log))
    assert again.returncode == 0 and "already imported" in again.stdout
    loss = store_loss(store, "job-1")
    assert len(loss) == 50 and loss[0] == pytest.approx(5.0)


def test_import_csv_with_run_and_rejections(tmp_path: Path) -> None:
    store, p = tmp_path / "s.duckdb", tmp_path / "m.csv"
    rows = [f"{s},{WALL0 + 10 * s},{3.0 - s / 100}" for s in range(20)]
    p.write_text("step,ts,loss\n" + "\n".join(rows) + "\n-4,,2.0\n7,,nan\n")
    r = cli("import", "--store", str(store), "--run", "csv-run", str(p))
    assert r.returncode == 0, r.stderr
    assert "20 train_metrics records stored, 2 rejected" in r.stdout
    assert f"rejected {p}:22: step must be >= 0, got -4" in r.stdout
    assert f"rejected {p}:23: loss is nan" in r.stdout
    assert len(store_loss(store, "csv-run")) == 20


def test_import_a_tensorboard_directory(tmp_path: Path) -> None:
    store, logdir = tmp_path / "s.duckdb", tensorboard_log(tmp_path / "tb")
    r = cli("import", "--store", str(store), "--run", "tb-run", str(logdir))
    assert r.returncode == 0, r.stderr
    assert "35 train_metrics records stored, 0 rejected" in r.stdout
    assert "eval/accuracy (30)" in r.stdout
    loss = store_loss(store, "tb-run")
    assert len(loss) == 35 and loss[0] == pytest.approx(4.0)
    with Store(str(store), read_only=True) as s:
        assert s.rows("SELECT min(ts), max(attempt) FROM train_metrics") == [(TS0, 1)]


def test_import_run_events_from_jsonl(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    event = {"run": "job-1", "ts": WALL0, "component": "NIC", "category": "Host"}
    log = write_jsonl(tmp_path / "ev.jsonl", [json.dumps(event)])
    r = cli("import", "--store", str(store), "--kind", "interruptions", str(log))
    assert r.returncode == 0 and "1 interruptions records stored" in r.stdout, r.stdout
    with Store(str(store), read_only=True) as s:
        assert s.rows("SELECT run_id, component FROM interruptions") == [("job-1", "NIC")]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["{dir}/missing.jsonl"], "missing.jsonl: no such file or directory"),
        (["{dir}/notes.txt"], "nothing stored from"),  # a text log with nothing we know
        (["{dir}/tb"], "TensorBoard files do not name their run; add --run"),
        (["--run", "r", "--kind", "checkpoints", "{dir}/tb"], "hold train_metrics only"),
        (["{dir}/bad.jsonl"], "nothing stored from"),
    ],
)
def test_import_errors_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "tb").mkdir()
    write_jsonl(tmp_path / "bad.jsonl", ['{"run": "r", "step": -1, "loss": 1}'])
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), *[a.format(dir=tmp_path) for a in args])
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0], r.stderr
    if "bad.jsonl" not in args[-1] and "notes.txt" not in args[-1]:
        assert not store.exists()  # files are checked before the store is created


def test_import_into_a_store_another_process_owns(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    log = metrics_jsonl(tmp_path / "m.jsonl")
    with Store(str(store)):
        r = cli("import", "--store", str(store), str(log))
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "is in use by another process" in lines[0], r.stderr
