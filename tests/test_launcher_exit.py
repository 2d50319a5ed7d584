"""torchrun's own ``failed (exitcode: -N) local_rank: L (pid: P)`` line is a worker's death by a
signal when the launcher had not signalled that pid itself, as its summary's ``exitcode : -9
(pid: P) (SIGKILL)`` entry is (``signals.WORKER_KILLED``): a log that shows only that line
(older torchrun logs through Python's ``logging``, ``ERROR:torch.distributed.elastic...``, and
prints no summary entry of its own before its traceback is cut) was told as "traceback cut
before its exception", its one fact (local rank 3 died of SIGKILL, the other three were
stopped because of it) read as teardown. A SIGABRT there is a native crash of the program.
A pid the launcher sent SIGTERM and then SIGKILLed after its grace period stays teardown.

srun's ``task N: Killed`` on one node as the only failure line of a job says the same of that
node's task: its node is named (``derive.waits.killed_alone``), its rank and the kill's sender
unknown; never beside another task's failure, a second killed node or a cancellation.

The lines are verbatim from public threads (tests/corpus/: ColossalAI#3514, Megatron-LM#1874)
and from the exam's real torch 2.13 jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry import signals as sig
from telemetry.collect.logs import logranks as lr
from tests.test_culprit import _import, _interruptions

CORPUS = Path(__file__).with_name("corpus")
API = "torch/distributed/elastic/multiprocessing/api.py"


def _only(tmp_path: Path, name: str, text: str) -> dict:
    log = tmp_path / name
    log.write_text(text)
    rows = _interruptions(_import(tmp_path, log)[0], "host, rank, component, description")
    assert len(rows) == 1, rows
    return rows[0]


def test_a_workers_death_by_sigkill_that_the_launcher_did_not_send_is_the_cause(
    tmp_path: Path,
) -> None:
    row = _only(tmp_path, "c.log", (CORPUS / "pytorch/colossalai-3514-exitcode-9.log").read_text())
    assert row["component"] == "Unknown"  # who sent the SIGKILL no line says
    assert row["description"].startswith(
        "Job stopped with no progress lines in the data: killed by SIGKILL, sender unknown "
        "(local rank 3 (pid 812917) exited with code -9 (SIGKILL))"), row["description"]
    assert (row["host"], row["rank"]) == (None, None)  # a local rank of a host no line names


def test_a_workers_sigabrt_is_a_native_crash(tmp_path: Path) -> None:
    text = (CORPUS / "megatron/megatron-1874-pure-virtual-at-exit.log").read_text()
    row = _only(tmp_path, "m.log", text)
    assert row["component"] == "Software Bug", row
    assert "local rank 0 (pid 3042) exited with code -6 (SIGABRT)" in row["description"]


def test_a_pid_the_launcher_stopped_itself_is_teardown(tmp_path: Path) -> None:
    # torchrun sent SIGTERM to pid 5330 and SIGKILLed it after its grace period: not its death
    # of its own; local rank 1 (pid 5331) raised (exit code 1) and is the failure told.
    text = (
        f"E1206 19:04:00.100000 5031 {API}:1002] failed (exitcode: 1) local_rank: 1 (pid: 5331)"
        " of binary: /usr/bin/python\n"
        f"W1206 19:04:00.290000 5031 {API}:1028] Sending process 5330 closing signal SIGTERM\n"
        f"E1206 19:04:31.000000 5031 {API}:1002] failed (exitcode: -9) local_rank: 0 (pid: 5330)"
        " of binary: /usr/bin/python\n"
    )
    log = tmp_path / "t.log"
    log.write_text(text)
    rows = _interruptions(_import(tmp_path, log)[0], "component, description, evidence")
    assert len(rows) == 1 and "SIGKILL" not in rows[0]["description"], rows
    assert sig.WORKER_KILLED not in rows[0]["evidence"], rows[0]["evidence"]


def test_which_exit_codes_are_a_signal_of_its_own() -> None:
    assert lr.killed_by("local rank 3 (pid 812917) exited with code -9") == (812917, "SIGKILL")
    assert lr.killed_by("local rank 2 (pid 8991) exited with code -11") == (8991, "SIGSEGV")
    assert lr.killed_by("local rank 0 (pid 1) exited with code -15") is None  # SIGTERM: teardown
    assert lr.killed_by("local rank 0 (pid 1) exited with code 1") is None


# srun's lines as the tests' real Slurm writes them (tests/fixtures/torchrun_exam/node_lost.log)
KILLED = "srun: error: c002: task 0: Killed\nsrun: Force Terminated StepId=120.0\n"


@pytest.mark.parametrize(
    ("name", "text", "host"),
    [
        # the corpus's arjuna-48: a job's only task killed on c002, nothing else in the lines
        ("alone", KILLED, "c002"),
        # srun killed the rest after another task failed: that one is the failure, not c002
        ("after another", "srun: error: c003: task 1: Exited with exit code 1\n" + KILLED, None),
        # the killed tasks of two nodes: which one first, the lines do not say
        ("two nodes", KILLED + "srun: error: c004: task 1: Killed\n", None),
        # someone cancelled it: the kill is the cancellation's
        ("cancelled", "slurmstepd: error: *** STEP 120.0 ON c002 CANCELLED AT "
         "2026-12-06T19:04:00 ***\n" + KILLED, None),
    ],
)
def test_srun_naming_one_killed_task_and_no_other_failure_places_it(
    tmp_path: Path, name: str, text: str, host: str | None
) -> None:
    row = _only(tmp_path, "slurm-120.out", text)
    assert row["host"] == host, (name, row)
    assert row["rank"] is None and row["component"] == "Unknown", (name, row)
    if host:
        assert "killed by SIGKILL, sender unknown on c002" in row["description"], row


# torchrun's summary as pasted in vllm-project/speculators#1115 (its Failures, verbatim; the
# paste's Root Cause entry, rank 1 at 13:02:58, is cut before its exit code and left out)
ESCALATED = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
/root/speculators/scripts/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-09-07_13:02:58
  host      : localhost
  rank      : 3 (local_rank: 3)
  exitcode  : 1 (pid: 14692)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
[2]:
  time      : 2026-09-07_13:03:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 14689)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 14689
[3]:
  time      : 2026-09-07_13:03:29
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 14691)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 14691
"""  # noqa: W291 (torchrun's own trailing space after "ChildFailedError:")


def test_a_sigkill_after_the_first_exit_is_the_launchers_stop_not_a_death(tmp_path: Path) -> None:
    # rank 3 exited (1) at 13:02:58; torchrun SIGTERMed the rest and SIGKILLed rank 0 after its
    # 30 s grace: the job stopped at 13:02:58, and neither rank 0's -9 nor rank 2's -15 (older
    # torchrun prints no "(SIGTERM)" after it) is a death of its own or the culprit
    log = tmp_path / "t.log"
    log.write_text(ESCALATED)
    rows = _interruptions(_import(tmp_path, log)[0], "ts, host, rank, component, description")
    assert len(rows) == 1, rows
    (row,) = rows
    assert str(row["ts"]) == "2026-09-07 13:02:58", row
    assert (row["rank"], row["host"]) == (None, None), row
    assert "SIGKILL" not in row["description"] and "killed by" not in row["description"], row


# DeepSpeed's launcher, as pasted in deepspeedai/DeepSpeed#4000 (the command cut short here)
DS_EXIT = """\
[2023-07-20 15:45:13,980] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3966
[2023-07-20 15:45:13,981] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3967
[2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', \
'main.py', '--local_rank=1', '--deepspeed', 'deepspeed.json', '--do_train'] exits with return \
code = {code}
"""


@pytest.mark.parametrize(("code", "component", "words"), [
    (-9, "Unknown", "killed by SIGKILL, sender unknown (DeepSpeed launcher: a worker exited with "
                    "code -9 (SIGKILL)"),
    (-11, "Software Bug", "killed by a signal (DeepSpeed launcher: a worker exited with code -11 "
                          "(SIGSEGV)"),
    (1, "Unknown", "the launcher or Slurm ended it"),  # an exception: whose, no line says
])
def test_deepspeeds_launcher_says_how_a_worker_exited_not_which(
    tmp_path: Path, code: int, component: str, words: str
) -> None:
    # launch.py logs its last spawned command (its loop variable), not the failed worker's:
    # "--local_rank=1" names no culprit
    row = _only(tmp_path, "ds.log", DS_EXIT.format(code=code))
    assert row["component"] == component and words in row["description"], row
    assert (row["rank"], row["host"]) == (None, None), row
