"""(#59, 4) One parser per log format: each framework's or launcher's lines are read by its own
module of ``telemetry/collect/logs/parsers/``, registered in ``parsers.FORMATS``, and each
reads at least one verbatim log of its writer (``tests/corpus/``: pasted in public threads;
``tests/fixtures/``: written by the real software on this machine)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

from telemetry.collect.logs import logline as ll
from telemetry.collect.logs import parsers
from telemetry.collect.logs.parsers import FORMATS

TESTS = Path(__file__).resolve().parent
SHARED = {"common", "stamps"}  # what every format uses; no format of their own
# Each format's verbatim logs: a new format adds its module, its line in FORMATS and one here.
FIXTURES = {
    "megatron": ["corpus/megatron/megatron-bridge-836-launch-failure.log"],
    "torchtitan": ["corpus/torchtitan/torchtitan-3065-dcp-save-hang.log"],
    "hf_trainer": ["fixtures/hf_exam/exception.log"],
    "lightning": ["fixtures/hf_exam/lightning_exception.log"],
    "deepspeed": ["corpus/deepspeed/deepspeed-3581-exit-11.log"],
    "torchrun": ["fixtures/torchrun/raise.log", "corpus/pytorch/colossalai-3514-exitcode-9.log"],
    "srun": ["corpus/slurm/soperator-854-node-failure.log",
             "corpus/slurm/arjuna-137-wtermsig9-slurmctld.log"],
    "pytorch": ["corpus/pytorch/sglang-1693-watchdog-allgather.log"],
    "nccl": ["corpus/nccl/nccl-1405-ib-completion-status12.log"],
    "kernel": ["corpus/kernel/pop-3363-xid79.log"],
    "mpich": ["corpus/slurm/e3sm-8699-devices-unavailable-nid004069.log"],
}


def test_the_registry_lists_every_format_module_once() -> None:
    """A format module left out of FORMATS would never be tried: each module of the package
    (but the shared ones) declares a FORMAT, and FORMATS holds exactly those, once each."""
    names = {m.name for m in pkgutil.iter_modules(parsers.__path__)} - SHARED
    declared = [importlib.import_module(f"{parsers.__name__}.{n}").FORMAT for n in sorted(names)]
    assert sorted(f.name for f in FORMATS) == sorted(f.name for f in declared)
    assert len({f.name for f in FORMATS}) == len(FORMATS)
    assert all(any(f is d for d in declared) for f in FORMATS)


def test_places_are_unique_so_the_order_is_the_registrys_own() -> None:
    """Recognisers of one kind are tried by place across formats (a specific cause before its
    symptom); two at one place would be ordered by the list instead, silently."""
    for kind in ("progress", "plan", "checkpoints", "failures", "signatures"):
        places = [r.place for f in FORMATS for r in getattr(f, kind)]
        assert len(places) == len(set(places)), kind


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_each_format_reads_a_verbatim_log_of_its_own(fmt: parsers.LineFormat) -> None:
    assert FIXTURES.get(fmt.name), f"{fmt.name}: no verbatim log listed in FIXTURES"
    for rel in FIXTURES[fmt.name]:
        text = (TESTS / rel).read_text(encoding="utf-8", errors="replace")
        bodies = (ll.strip_prefix(ll.journal_json(raw) or raw)[1] for raw in text.splitlines())
        assert any(fmt.recognises(b) for b in bodies), f"{fmt.name} reads no line of {rel}"


@pytest.mark.parametrize(
    "line",
    [
        "[rank0]:[E626 06:24:44.159932949 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE) ran for 600049 "
        "milliseconds before timing out.",
        "[rank14]:[E ProcessGroupNCCL.cpp:1414] [PG 1 Rank 14] Process group watchdog thread "
        "terminated with exception: [Rank 14] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=15734, OpType=ALLREDUCE) ran for 600098 milliseconds before timing out.",
        "[rank3]:[E218 07:34:53.620 ProcessGroupNCCL.cpp:577] [PG 1 Rank 3] Watchdog caught coll",
        "[E ProcessGroupNCCL.cpp:475] [Rank 7] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=BROADCAST)",
    ],
)
def test_a_watchdog_message_starts_at_its_words_not_at_the_rank_prefix(line: str) -> None:
    """The interruption's description quotes this detail: "NCCL watchdog timeout (] Watchdog
    caught ...)" kept the "]" of "[Rank 0]" before it."""
    found = ll.failure(line)
    assert found is not None and found[0] == "nccl_timeout"
    assert found[1].startswith("Watchdog caught coll"), found[1]
