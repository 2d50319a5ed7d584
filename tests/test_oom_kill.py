"""A SIGKILL's sender, where the kernel says it (#58 item 2): the culprit exam's ``oom_kill``
job (``benchmarks/exam.py``: real torchrun, two agents in their own UTS namespaces; rank 2 on
gpu-b20 put alone in a memory cgroup and killed by the kernel's own OOM killer), its log and
the lines ``dmesg -T`` held about the kill, kept as that node's kernel log
(``tests/fixtures/torchrun_exam/oom_kill.log``, ``gpu-b20-kern.log``). torchrun says only
``exitcode : -9 (SIGKILL)``: with the kernel's line naming that pid on that host, the cause is
the host's memory, not unknown; a kill the log cannot place on the rank's host says nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

from telemetry import signals as sig
from telemetry.collect.logs import logline as ll
from tests.test_culprit import _import, _interruptions

EXAM = Path(__file__).with_name("fixtures") / "torchrun_exam"
COLS = "host, rank, component, description, evidence"


def _row(tmp_path: Path, name: str, *kernel: tuple[Path, str]) -> dict:
    d = tmp_path / name
    d.mkdir()
    files = [EXAM / "oom_kill.log"]
    for src, as_name in kernel:
        files.append(d / as_name)
        shutil.copy(src, files[-1])
    rows = _interruptions(_import(d, *files)[0], COLS)
    return rows[0]


def test_the_kernels_oom_kill_of_the_ranks_pid_is_its_cause(tmp_path: Path) -> None:
    kern = EXAM / "gpu-b20-kern.log"
    (line,) = [ln for ln in kern.read_text().splitlines() if "Killed process" in ln]
    got = ll.failure(line)
    assert got is not None and got[0] == sig.HOST_OOM and "Killed process 21254 (python)" in got[1]
    assert ll.failure(kern.read_text().splitlines()[0]) is None  # the oom-kill: summary line
    alone = _row(tmp_path, "alone")
    assert (alone["rank"], alone["host"], alone["component"]) == (2, "gpu-b20", "Unknown")
    told = _row(tmp_path, "told", (kern, "gpu-b20-kern.log"))
    assert (told["rank"], told["host"], told["component"]) == (2, "gpu-b20", "Software Bug")
    assert "OOM killer (host out of memory)" in told["description"], told["description"]
    assert "Killed process 21254" in told["description"]
    # the same kill in a kernel log of no known node, or of the other node: says nothing
    for name, as_name in (("nameless", "kern.log"), ("other", "gpu-b19-kern.log")):
        row = _row(tmp_path, name, (kern, as_name))
        assert (row["rank"], row["host"], row["component"]) == (2, "gpu-b20", "Unknown"), name
