"""What every line format shares: the ``LineFormat`` a format module declares, the failure
tuple the recognisers return, and reading a number the way the trainers print it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

# (kind, detail, xid, pci, host, gpu, time text)
Failure = tuple[str, str, int | None, str | None, str | None, int | None, str | None]
# What a failure recogniser returns for a line that is its own and says no failure: the
# recognisers after it are not tried (``srun: error`` lines of no kind it knows)
NOT_A_FAILURE: tuple[()] = ()

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)")


class Keyed(NamedTuple):
    """A recogniser tried only on lines containing ``key`` (a cheap test before its regex; ""
    for one that tests its own words, several of them)."""

    place: int
    key: str
    read: Callable[[str], Any]


class CheckpointRule(NamedTuple):
    """A checkpoint line: groups ``step`` and ``path`` when the line gives them."""

    place: int
    rx: re.Pattern[str]
    kind: str  # save_start, save_end, load
    phase: str | None  # start, finish (loads)
    needs_folder: bool = False  # a path with no ``/`` is not a checkpoint ("from scratch")


class Signature(NamedTuple):
    """A failure's text that says its cause, tried when one of ``keys`` is in the line."""

    place: int
    kind: str
    keys: tuple[str, ...]
    rx: re.Pattern[str]


@dataclass(frozen=True)
class LineFormat:
    """What one framework's or launcher's lines say, for ``logline``'s dispatch.

    Each recogniser carries its ``place`` among every format's recognisers of its kind (lower
    first): the dispatch tries them in that order across formats (a specific cause before its
    symptom), so adding a format never reorders the others'. Recognisers return None for a line
    that is not theirs."""

    name: str
    prefilter: tuple[str, ...] = ()  # regex parts any line worth reading contains (RE2 and re)
    progress: tuple[Keyed, ...] = ()  # -> {step, loss, ...}
    plan: tuple[Keyed, ...] = ()  # -> [(fact, value)] said once about the job
    checkpoints: tuple[CheckpointRule, ...] = ()
    checkpoint_keys: tuple[str, ...] = ()  # a line without any is no checkpoint line (cheap)
    failures: tuple[Keyed, ...] = ()  # -> Failure, or NOT_A_FAILURE to stop looking
    signatures: tuple[Signature, ...] = ()

    def recognises(self, body: str) -> bool:
        """Whether any of this format's recognisers reads ``body`` (a line without prefix)."""
        for k in (*self.progress, *self.plan, *self.failures):
            if k.key in body and k.read(body):
                return True
        return any(c.rx.search(body) for c in self.checkpoints) or any(
            s.rx.search(body) for s in self.signatures)


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        m = _NUMBER.search(text)
        return float(m.group(0)) if m else None


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None
