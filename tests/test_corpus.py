"""The corpus of real failure logs from public GitHub issues (tests/corpus/README.md), imported
blind through the CLI's entry point and scored against the labels written from each thread.

Issue #56's rule is absolute for one thing: import never fails on any excerpt. Its accuracy
targets (cause right >= 95 %, culprit precision >= 98 %, recall >= 90 %) are not met yet; the
levels measured on 2026-12-06 are asserted as a floor below, so a change that makes any of
them worse fails here, and a change that makes them better moves the floor up by hand."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from telemetry.collect.logs.logline import host_from_filename
from telemetry.reference import llama3_interruptions
from telemetry.vocabulary import PLANNED_CATEGORY, PLANNED_COMPONENT
from tests.corpus.score import (
    CORPUS,
    Result,
    load_labels,
    misses,
    score_all,
    shown,
    summarise,
    table,
)
from tests.corpus.score import LABELS as LABELS_FILE

LABELS = load_labels()
# 130 CLI runs into fresh stores: ~40 s on an idle 2-core machine, over 2 min when it is shared.
pytestmark = pytest.mark.slow

# Excerpts `factoryfloor import` still refuses with "nothing stored from FILE: no valid
# records" (exit 1). Issue #56: import must never fail on any. Each is a strict xfail: when a
# fix makes one import, its test XPASSes and fails until its name is taken off this list, so
# the list only shrinks (8 on 2026-12-06 before the no-time, driver and pasted-shape fixes;
# the last 2, a traceback cut before its exception line and kubelet's "nvidia-container-cli:
# detection error: driver error: timed out", import since the cut-traceback and driver-timeout
# signals). Empty: a new excerpt that is refused fails test_import_exits_0.
REFUSED_2026_12_06: frozenset[str] = frozenset()

# Floors measured 2026-12-06 over all 69 excerpts (issue #56's targets beside them), after a
# log with no wall-clock time became one interruption at a time unknown, NCCL's usage and CUDA
# errors stopped being "the network", the driver's GPU faults without an XID code and the
# pasted shapes (a bar, a wrapped line, a joined summary) were read. Counts, not rates, so
# adding excerpts cannot hide a regression. (Before: 61 / 31 / 25 / 1; then 67 / 65 / 58 / 4
# before a traceback cut before its exception line and nvidia-container-cli's driver timeout
# were read: the first a failure of unknown cause, the second its host's GPU; 60 causes right
# before a SIGKILL with no line of its sender became of unknown cause, as labelled: cppo-6;
# 61 before torchrun's own "failed (exitcode: -6)" line counted as a native crash: megatron-1874;
# 62 before NCCL's "remote process exited or there was a network error", "Connection reset by
# peer" and ncclSystemError became "the peer exited, or the network failed" (unknown): nccl-2076's
# thread later found IB trouble its lines do not show, and megatron-792's NCCL errors, called the
# network, were a software bug: one cause right less, the one cause named wrong gone.)
FLOOR_IMPORT_OK = 100  # target: all of them
FLOOR_FOUND = 99  # an interruption found (each excerpt is one failure)
FLOOR_CAUSE_RIGHT = 88  # target: >= 95 % of excerpts
# A cause named that the thread contradicts ("Unknown" names none): mineru-426's "unspecified
# launch failure" (a program's in 3 of the 4 threads here, a bad card in this one) and
# gigahorse-301's XID 62 after the application's XID 31 and a driver update (Faulty GPU named,
# the thread settled nothing). Both kept as the product answers them (2026-12-08).
CEILING_CAUSE_WRONG = 2
FLOOR_CULPRIT_RIGHT = 14  # target: recall >= 90 % of the 20 culprits the threads established
CEILING_VICTIMS = 0  # a culprit the thread contradicts; target: precision >= 98 %
# A culprit named where the thread established none. Counted against precision (#56: a wrong
# answer is worse than "unknown"). If a fix names one on evidence the thread also gives, add
# that evidence to the label (labels.toml) rather than raising this ceiling.
CEILING_UNCONFIRMED = 0
# The same over what the excerpts' own lines show (labels' from_thread parts left out)
FLOOR_SHOWN_CAUSE_RIGHT = 88  # of 92
FLOOR_SHOWN_CULPRIT_RIGHT = 14  # of 17


@cache
def results() -> dict[str, Result]:
    """Every excerpt imported once per test session (about 40 s for all of them)."""
    return {r.label.file: r for r in score_all(LABELS)}


def _params(refused: frozenset[str] = frozenset()) -> list:
    xfail = pytest.mark.xfail(strict=True, reason="refused today (REFUSED_2026_12_06)")
    return [
        pytest.param(lab.file, id=lab.file, marks=[xfail] if lab.file in refused else [])
        for lab in LABELS
    ]


def test_at_least_60_labelled_excerpts_each_with_its_thread() -> None:
    assert len(LABELS) >= 60
    logs = {p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*.log")}
    assert logs == {lab.file for lab in LABELS}, "every excerpt has one label and no label dangles"
    url = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$")
    for lab in LABELS:
        assert url.match(lab.url), lab.file
        # a name like node-7-dmesg.log names its node to the product; an excerpt's must not
        assert host_from_filename(lab.file) is None, lab.file
        lines = lab.path.read_text(encoding="utf-8").splitlines()
        assert 0 < len(lines) <= 200, lab.file
    assert len({lab.url for lab in LABELS}) == len(LABELS), "one excerpt per thread"


def test_labels_use_the_products_cause_vocabulary() -> None:
    vocab = {c.component: c.category for c in llama3_interruptions()}
    vocab |= {PLANNED_COMPONENT: PLANNED_CATEGORY, "Unknown": "Unknown"}
    for lab in LABELS:
        assert vocab.get(lab.component) == lab.category, (lab.file, lab.component, lab.category)


@pytest.mark.parametrize("file", _params())
def test_import_never_raises(file: str) -> None:
    r = results()[file]
    assert not r.crashed, f"{file}: import raised\n{r.error}"
    assert "Traceback (most recent call last)" not in r.error, r.error


@pytest.mark.parametrize("file", _params(REFUSED_2026_12_06))
def test_import_exits_0(file: str) -> None:
    r = results()[file]
    assert r.exit_code == 0, f"{file}: exit {r.exit_code}: {r.error}"


def test_scores_hold_their_floor() -> None:
    rs = list(results().values())
    s, report = summarise(rs), table(rs) + "\n" + misses(rs)
    assert s.crashed == 0, report
    assert s.import_ok >= FLOOR_IMPORT_OK, report
    assert s.found >= FLOOR_FOUND, report
    assert s.cause_right >= FLOOR_CAUSE_RIGHT, report
    assert s.cause_wrong <= CEILING_CAUSE_WRONG, report
    assert s.right >= FLOOR_CULPRIT_RIGHT, report
    assert s.victim <= CEILING_VICTIMS, report
    assert s.unconfirmed <= CEILING_UNCONFIRMED, report
    w = shown(rs)
    assert w.cause_right >= FLOOR_SHOWN_CAUSE_RIGHT, report
    assert w.right >= FLOOR_SHOWN_CULPRIT_RIGHT, report


def test_a_label_part_from_the_thread_alone_leaves_the_shown_score(tmp_path: Path) -> None:
    """``from_thread`` takes a label's cause or culprit out of the score over what the lines
    show, and only that; anything else in it is refused by name."""
    rs = list(results().values())
    w, s = shown(rs), summarise(rs)
    cause_only = sum("cause" in r.label.from_thread for r in rs)
    culprit_only = sum("culprit" in r.label.from_thread and r.label.has_culprit for r in rs)
    assert (w.causes, w.culprits) == (s.n - cause_only, s.with_culprit - culprit_only)
    assert cause_only and culprit_only  # both kinds are used (labels.toml)
    bad = tmp_path / "labels.toml"
    bad.write_text(LABELS_FILE.read_text("utf-8").replace(
        'from_thread = ["cause"]', 'from_thread = ["cuase"]', 1), "utf-8")
    with pytest.raises(ValueError, match="cuase"):
        load_labels(bad)
