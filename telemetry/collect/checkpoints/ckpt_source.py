"""Checkpoint directories of each tier, as a source: scanned once by ``factoryfloor import
--checkpoints TIER=PATH``, watched by ``ingest``/``serve --checkpoints TIER=PATH``.

Each round (``poll``) every directory is scanned (``ckptdirs``; followed: ``CheckpointWatcher``),
each checkpoint row a batch of its own keyed by (run, step, tier, path, status), so scanning the
same tree again, or after a restart, stores nothing twice; one deleted later by rotation stays in
history. Then a ``Derive`` batch for the runs touched, carrying
the tier roots: the store writer remembers them for the run (the restores are judged against
them) and derives its interruptions again. Watching, that batch comes on the first round (the
roots are known before any checkpoint is) and after each round that found new checkpoints.

The logs source never imports this one, nor this one it: where both are given (``import FILE
--checkpoints TIER=PATH``), the command composes them: it writes their ``Derive`` batches as
one, after both (``app/commands/import_.py``). Each tier root has a health row
(``checkpoints:TIER=PATH`` followed, ``cluster:`` before the split; ``import:TIER=PATH`` as
an import's files have).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from telemetry.errors import FactoryFloorError
from telemetry.ingest.seam import (
    RUN_OPTION,
    Batch,
    Derive,
    Health,
    HealthBook,
    Option,
    SourceContext,
    SourceSpec,
    Tables,
    Written,
)
from telemetry.vocabulary import TIERS


def parse_checkpoint_arg(text: str) -> tuple[str, str]:
    """``TIER=PATH`` -> (tier, path); ValueError naming what is wrong."""
    tier, sep, path = text.partition("=")
    tier = tier.strip().lower()
    if not sep or not path:
        raise ValueError(f"--checkpoints {text!r}: expected TIER=PATH, e.g. pfs=/lustre/ckpt/run")
    if tier not in TIERS:
        raise ValueError(f"--checkpoints {text!r}: tier must be one of {', '.join(TIERS)}")
    return tier, path


class CheckpointSource:
    """The checkpoint directories of one run (module doc)."""

    name = "checkpoints"
    produces = (Tables, Derive)
    health_rows = True

    def __init__(
        self,
        checkpoints: Sequence[tuple[str, str]],
        run: str | None = None,
        follow: bool = False,
        grace_s: float | None = None,
    ) -> None:
        from telemetry.collect.checkpoints import ckptdirs

        self.checkpoints = list(checkpoints)
        self.run, self.follow = run, follow
        self.kind = "checkpoints" if follow else "import"  # the health rows' names (module doc)
        self._grace = {} if grace_s is None else {"grace_s": grace_s}
        self.watchers = {
            (tier, root): ckptdirs.CheckpointWatcher(tier, root, run, **self._grace)
            for tier, root in self.checkpoints
        }
        self.book = HealthBook()
        self.in_progress = 0
        self.rows = 0  # checkpoint rows found, every round
        self.runs_touched: set[str] = set()
        self.checkpoint_counts: dict[str, dict[str, int]] = {}  # tier -> status -> count
        self.checkpoint_problems: list[str] = []
        self._told_roots = False

    def roots(self) -> dict[str, list[str]]:
        """{tier: [absolute roots]}, as a ``Derive`` batch remembers them for the run."""
        out: dict[str, list[str]] = {}
        for tier, root in self.checkpoints:
            out.setdefault(tier, []).append(os.path.abspath(root))
        return out

    def poll(self, now: datetime) -> Iterator[Batch]:
        found = 0
        for (tier, root), watcher in self.watchers.items():
            for batch in self._scan(now, tier, root, watcher):
                found += 1
                yield batch
        self.rows += found
        if found and self.run:
            self.runs_touched.add(self.run)
        first = not self._told_roots and self.run is not None
        if found or first or (not self.follow and self.run):
            self._told_roots = True
            yield Derive(tuple(sorted(self.runs_touched)) or None, self.roots(), self.run)

    def _scan(self, now: datetime, tier: str, root: str, watcher: Any) -> Iterator[Tables]:
        from telemetry.collect.checkpoints import ckptdirs

        if self.follow:
            rows, problems = watcher.poll(now), watcher.new_problems
        else:  # one scan: an incomplete checkpoint past its grace is failed at once
            res = ckptdirs.scan(tier, root, run=self.run, now=now, **self._grace)
            rows, problems = res.checkpoints, res.problems
            self.in_progress += len(res.in_progress)
        self.checkpoint_problems += [f"{tier}={root}: {p}" for p in problems]
        counts = self.checkpoint_counts.setdefault(tier, {})
        for c in rows:
            counts[c.status] = counts.get(c.status, 0) + 1
            if c.run:
                self.runs_touched.add(c.run)
            key = hashlib.sha256(repr(c.key).encode()).hexdigest()[:24]
            yield Tables(
                {"checkpoints": ckptdirs.frame([c])}, now, 0, batch_id=f"ckpt:{key}",
                label=f"checkpoint {c.tier} step {c.step} ({c.status})",
            )  # fmt: skip
        root_ok = os.path.isdir(root)
        self.book.record(
            now, f"{self.kind}:{tier}={root}", root_ok,
            None if root_ok else "; ".join(problems[:1]) or "missing", sum(counts.values()), 0,
        )  # fmt: skip

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        """Nothing to advance: a scan keeps no position in a file (as before the split)."""

    def health(self) -> list[Health]:
        return self.book.all()


def build(values: Mapping[str, Any], ctx: SourceContext) -> CheckpointSource | None:
    ckpts = list(values.get("checkpoints") or [])
    if not ckpts:
        return None
    try:
        pairs = [parse_checkpoint_arg(c) for c in ckpts]
    except ValueError as exc:
        raise FactoryFloorError(str(exc)) from None
    follow = ctx.command in ("ingest", "serve")
    return CheckpointSource(pairs, run=values.get("run"), follow=follow)


_CKPT = Option(
    "--checkpoints",
    {
        "action": "append",
        "default": [],
        "metavar": "TIER=PATH",
        "help": "a checkpoint directory of a tier (nvme, pfs or object); repeatable",
    },
)

SPEC = SourceSpec(
    name="checkpoints",
    summary="checkpoint directories per tier (nvme, pfs, object)",
    options={"import": (_CKPT,), "ingest": (_CKPT, RUN_OPTION), "serve": (_CKPT, RUN_OPTION)},
    build=build,
    ask="--checkpoints TIER=PATH",
)
