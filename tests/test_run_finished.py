"""A finished run is "finished", never "stalled" (#37, 2): its last step is the planned steps
(Megatron-LM's ``iteration N/ N``, TorchTitan's ``total steps``), its trainer said it is done
("[after training is done]", "Training completed", Lightning's ``max_steps`` reached, an
"exiting program" line), or its Slurm job COMPLETED. Logs written as the frameworks write them,
imported with the user's command; the alerts judged long after the data ended, as a user who
opens the store a day later sees them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from telemetry.alerting import store_alerts
from telemetry.metrics.alert_rules import active_alerts
from telemetry.queries import TimeRange
from telemetry.store import Store, slurm_store
from tests.conftest import cli

RUN = "orion"
T0 = datetime(2025, 2, 18, 7, 0, 0)


def _megatron(steps: range, total: int, step_s: float = 2.0) -> list[str]:
    """Megatron-LM training.py's training_log lines (rank 0, with its datetime prefix)."""
    return [
        f" [{T0 + timedelta(seconds=s * step_s):%Y-%m-%d %H:%M:%S}] iteration {s:>8}/{total:>8} | "
        f"consumed samples: {s * 512:>10} | elapsed time per iteration (ms): {step_s * 1000:.1f}"
        " | learning rate: 1.000E-04 | global batch size:   512 | lm loss: 2.500000E+00 | "
        "loss scale: 1.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan "
        "iterations:   0 |"
        for s in steps
    ]


def _titan(total: int, last: int) -> list[str]:
    """TorchTitan train.py's start line and step lines (its logger's format)."""
    out = [f"[titan] {T0:%Y-%m-%d %H:%M:%S},000 - root - INFO - Training starts at step 1, with "
           f"local batch size 8, global batch size 64, sequence length 8192, total steps "
           f"{total} (warmup 20)"]  # fmt: skip
    for s in range(1, last + 1):
        t = T0 + timedelta(seconds=3 * s)
        out.append(f"[titan] {t:%Y-%m-%d %H:%M:%S},123 - root - INFO - step: {s:2}  loss:  "
                   f"7.1234  grad_norm:  1.2345  memory: 30.12GiB(38.01%)  tps: 3,456  "
                   f"tflops: 160.12  mfu: 16.19%")  # fmt: skip
    return out


def _state(tmp_path: Path, name: str, lines: list[str]) -> tuple[dict, dict]:
    """(the run's summary, its alerts a day after its data ended) of the log imported."""
    log = tmp_path / name
    log.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", RUN, str(log))
    assert r.returncode == 0, r.stderr
    s = cli("summary", "--store", str(store), "--json")
    assert s.returncode == 0, s.stderr
    run = json.loads(s.stdout)["runs"][0]
    text = cli("summary", "--store", str(store)).stdout
    with Store(str(store), read_only=True) as st:
        lo, hi = st.rows("SELECT min(ts), max(ts) FROM train_metrics")[0]
        later = hi + timedelta(days=1)
        found = active_alerts(st, RUN, TimeRange(lo, later), targets_at=later)
    return run | {"text": text}, {r.alert: r for r in found.itertuples()}


@pytest.mark.parametrize(
    ("name", "tail", "says"),
    [
        ("slurm-1.out", [], "planned steps reached: step 1,000 of 1,000"),
        ("slurm-2.out", ["[after training is done] datetime: 2025-02-18 07:33:21 "],
         "after training is done"),
        ("slurm-3.out", ["[exiting program at iteration 1000] datetime: 2025-02-18 07:33:21 "],
         "exiting program at iteration 1000"),
    ],
)  # fmt: skip
def test_a_megatron_run_that_reached_its_end_is_finished(
    tmp_path: Path, name: str, tail: list[str], says: str
) -> None:
    total = 1000 if not tail else 5000  # with a closing line, the planned steps need not match
    run, alerts = _state(tmp_path, name, _megatron(range(10, 1010, 10), total) + tail)
    assert run["state"] == "finished" and says in run["ended"]["detail"]
    assert run["ended"]["origin"].endswith(f"{name}:{100 + len(tail)}")  # the line saying it
    assert f"{RUN} (finished at step 1,000)" in run["text"]
    # a day later: finished, not stalled, not "not training", no tier overdue
    assert alerts["Run finished"].severity == "info" and says in alerts["Run finished"].detail
    assert not {"Run stalled", "Job not training", "Run stopped"} & set(alerts)


def test_a_megatron_run_short_of_its_planned_steps_is_not_finished(tmp_path: Path) -> None:
    run, alerts = _state(tmp_path, "slurm-4.out", _megatron(range(10, 1010, 10), 100000))
    # nor running: its log went silent long ago saying nothing of how it ended (#57, 5)
    assert run["state"] == "unknown" and "says how the job ended" in run["ended"]["detail"]
    assert "Run finished" not in alerts and "Job not training" in alerts


def test_a_titan_run_at_its_total_steps_is_finished(tmp_path: Path) -> None:
    run, alerts = _state(tmp_path, "titan.log", _titan(total=40, last=40))
    assert run["state"] == "finished"
    assert run["ended"]["detail"] == "planned steps reached: step 40 of 40"
    assert "Run finished" in alerts and "Job not training" not in alerts
    (tmp_path / "short").mkdir()
    short, _ = _state(tmp_path / "short", "titan.log", _titan(total=40, last=30))
    assert short["state"] == "unknown"


def test_hugging_face_and_lightning_say_they_are_done(tmp_path: Path) -> None:
    hf = [f"{{'loss': 1.{s:02d}, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.{s:02d}, "
          f"'step': {s}}}" for s in range(1, 30)]  # fmt: skip
    stamped = [f"[{T0 + timedelta(seconds=s):%Y-%m-%d %H:%M:%S}] {line}"
               for s, line in enumerate(hf)]  # fmt: skip
    done = f"[{T0 + timedelta(seconds=40):%Y-%m-%d %H:%M:%S}] "
    for sub, last in (
        ("hf", done + "Training completed. Do not forget to share your model on "
                      "huggingface.co/models =)"),
        ("pl", done + "`Trainer.fit` stopped: `max_steps=29` reached."),
    ):  # fmt: skip
        (tmp_path / sub).mkdir()
        run, alerts = _state(tmp_path / sub, "train.log", [*stamped, last])
        assert run["state"] == "finished", sub
        assert "Run finished" in alerts and "Run stalled" not in alerts


def _slurm_job(store: Path, state: str) -> None:
    """The run's Slurm job 81234 as the Slurm source stores it (sacct's ``state``), ended a
    minute after the log's last step."""
    with Store(str(store)) as s, s.transaction(["slurm_jobs"]) as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, hosts, state, "
            "start_ts, end_ts, run_id, run_source) VALUES ('c', 81234, 0, '81234', ['n0'], "
            "?, ?, ?, ?, 'mapped')",
            [state, T0, T0 + timedelta(seconds=2061), RUN],
        )


def test_a_run_whose_slurm_job_completed_is_finished(tmp_path: Path) -> None:
    """A log that says nothing of its end (100 of 100,000 steps), its Slurm job COMPLETED
    (sacct's state, as the Slurm source stores it) a minute after the last step."""
    _slurm_job(tmp_path / "s.duckdb", "COMPLETED")
    run, alerts = _state(tmp_path, "slurm-81234.out", _megatron(range(10, 1010, 10), 100000))
    assert run["state"] == "finished" and run["ended"]["detail"] == "Slurm job 81234 COMPLETED"
    assert "Run finished" in alerts and "Job not training" not in alerts


@pytest.mark.parametrize("state", ["TIMEOUT", "FAILED", "NODE_FAIL"])
def test_a_run_whose_slurm_job_stopped_is_stopped(tmp_path: Path, state: str) -> None:
    """The same log, its Slurm job ended TIMEOUT/FAILED/NODE_FAIL (sacct's word) a minute
    after the last step: summary said "running" beside the Jobs page's Slurm state (#57, 5)."""
    _slurm_job(tmp_path / "s.duckdb", state)
    run, _ = _state(tmp_path, "slurm-81234.out", _megatron(range(10, 1010, 10), 100000))
    assert run["state"] == "stopped" and run["ended"]["detail"] == f"Slurm job 81234 {state}"
    assert run["ended"]["job_state"] == state


def test_a_run_whose_slurm_job_hit_its_time_limit_is_stopped_and_alerted(tmp_path: Path) -> None:
    """The job's log ends with slurmstepd's time-limit line and sacct says TIMEOUT (``--slurm``
    made the run for the job, ``--run-from-job``): the run stopped, it did not finish, and the
    stop is what the receivers are sent (#58: the run left the live runs when its job ended,
    so no alert was ever sent for it)."""
    store = tmp_path / "s.duckdb"
    last = T0 + timedelta(seconds=2 * 980)
    end = last + timedelta(seconds=1)
    with Store(str(store)) as s, s.transaction(["slurm_jobs"]) as con:
        con.execute(
            "INSERT INTO slurm_jobs (cluster, job_id_raw, requeue, job_id, name, hosts, state, "
            "start_ts, end_ts, polled_ts, run_id, run_source) VALUES ('c', 81235, 0, '81235', "
            "?, ['n0'], 'TIMEOUT', ?, ?, ?, ?, 'mapped')",
            [RUN, T0, end, end + timedelta(seconds=3), RUN],
        )
    with Store(str(store)) as s:  # serve polled Slurm before the log's first line came
        slurm_store.refresh(s)
    cut = (f"slurmstepd: error: *** JOB 81235 ON n0 CANCELLED AT {end:%Y-%m-%dT%H:%M:%S} DUE TO "
           "TIME LIMIT ***")  # fmt: skip
    run, alerts = _state(tmp_path, "slurm-81235.out", [*_megatron(range(10, 990, 10), 100000), cut])
    assert run["state"] != "finished", run.get("ended")
    assert "Run finished" not in alerts
    with Store(str(store), read_only=True) as st:
        sent = store_alerts(st, now=end + timedelta(seconds=10))
    stops = [a for a in sent if a.labels["alertname"] == "RunStopped"]
    assert [a.labels["run"] for a in stops] == [RUN], [a.labels for a in sent]
    assert "time limit" in stops[0].description.lower()
    assert "culprit unknown" in stops[0].description  # no rank or host blamed for it
