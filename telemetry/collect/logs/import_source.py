"""Training logs on disk as a source: ``factoryfloor import FILE...``.

Every file is read (by its format, ``collect.logs.formats``) when the source is made, before any
store is opened, so a typo or an unreadable file writes nothing. ``poll`` then yields each
file's records in chunks of ``IMPORT_CHUNK``; a chunk's batch id is a hash of the file's bytes,
the kind and the run plus its offset, so importing the same file again stores nothing ("already
imported"). Each file's health row is ``import:<path>``: down when none of its records was
valid. The straggler callback's scores a file held (``importers.FileRecords.rank_perf``) follow
its records as one ``rank_perf`` batch, stored at most once the same way.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from telemetry.collect.logs.formats import FORMATS, read_log
from telemetry.ingest.seam import (
    Batch,
    Health,
    HealthBook,
    Option,
    Records,
    SourceContext,
    SourceSpec,
    Tables,
    Written,
)

if TYPE_CHECKING:  # imported when files are read, not with the command line's parser
    from telemetry.collect.logs.importers import FileRecords

IMPORT_KINDS = ("train_metrics", "interruptions", "checkpoints", "runs")  # records.KINDS
IMPORT_CHUNK = 20_000  # records per transaction; fixed, so a re-import finds the same batch ids


@dataclass
class ImportedFile:
    """One file's account: what was stored, refused (``file:line: reason``) and ignored."""

    log: FileRecords
    digest: str
    stored: int = 0
    duplicates: int = 0
    scores: int = 0  # run-level straggler score rows stored (``ptlperf``)
    scores_again: bool = False  # ... stored before: nothing written
    rejected: list[str] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    chunks_left: int = 0

    @property
    def usable(self) -> bool:
        return bool(self.stored or self.duplicates or self.scores or self.scores_again)


def log_digest(path: str, kind: str, run: str | None) -> str:
    """Content hash of a log (and what it is imported as): the batch ids of its chunks."""
    from telemetry.collect.logs.importers import event_files

    h = hashlib.sha256(f"{kind}\0{run}\0".encode())
    for f in event_files(path) if os.path.isdir(path) else [path]:
        with open(f, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()[:32]


class ImportSource:
    name = "import"
    produces = (Records, Tables)
    health_rows = True
    interval_s = 0.0  # read once

    def __init__(
        self,
        paths: list[str],
        kind: str,
        run: str | None,
        on_file: Callable[[ImportedFile], None] | None = None,
        chunk: int = IMPORT_CHUNK,
    ) -> None:
        """Reads every file now (``FactoryFloorError`` naming the first that cannot be read);
        ``on_file`` is told each file's account once its last chunk is settled."""
        self.kind, self.run, self.chunk, self.on_file = kind, run, chunk, on_file
        logs = [read_log(p, kind, run) for p in paths]
        self.files = [ImportedFile(log, log_digest(log.path, kind, run)) for log in logs]
        for f in self.files:
            f.rejected = [f"{b.origin}: {b.reason}" for b in f.log.bad_lines]
            f.ignored = dict(f.log.ignored_tags)
            if unnamed := sum(1 for run, _ in f.log.rank_perf if run is None):
                why = f"{unnamed:,} straggler scores name no run; add --run"
                f.rejected.append(f"{f.log.path}: {why}")
        self._chunks: dict[str, tuple[ImportedFile, int]] = {}
        self.book = HealthBook()

    def poll(self, now: datetime) -> Iterator[Records]:
        for f in self.files:
            starts = range(0, len(f.log.records), self.chunk)
            scores = self._scores(f, now)
            f.chunks_left = len(starts) + (scores is not None)
            if not f.chunks_left:
                self._done(f, now)
            for start in starts:
                batch_id = f"import:{f.digest}:{start}"
                self._chunks[batch_id] = (f, start)
                yield Records(
                    self.kind,
                    f.log.records[start : start + self.chunk],
                    f"{self.name}:{f.log.path}",
                    origin="import",
                    batch_id=batch_id,
                )
            if scores is not None:
                yield scores

    def _scores(self, f: ImportedFile, now: datetime) -> Tables | None:
        """The file's straggler score rows that name their run, as one batch (None: none)."""
        from telemetry.collect.logs.ptlperf import frame

        rows = [(run, r) for run, r in f.log.rank_perf if run is not None]
        if not rows:
            return None
        batch_id = f"import:{f.digest}:rank_perf"
        self._chunks[batch_id] = (f, -1)
        label = f"{f.log.path}: {len(rows):,} straggler scores"
        return Tables({"rank_perf": frame(rows)}, now, 0, batch_id, label)

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        from telemetry.ingest.records import RecordReport

        if not isinstance(batch, Records | Tables) or batch.batch_id not in self._chunks:
            return
        f, start = self._chunks.pop(batch.batch_id)
        rep = written.report
        if isinstance(batch, Tables):
            f.scores_again = written.duplicate
            f.scores = 0 if written.duplicate or not written.ok else len(batch.tables["rank_perf"])
        elif isinstance(rep, RecordReport):
            f.stored += rep.stored
            f.duplicates += rep.duplicate
            f.rejected += [f"{f.log.origins[start + r.index]}: {r.reason}" for r in rep.rejected]
            for key, n in rep.ignored_fields.items():
                f.ignored[key] = f.ignored.get(key, 0) + n
        f.chunks_left -= 1
        if f.chunks_left == 0:
            self._done(f, now, written.error)

    def _done(self, f: ImportedFile, now: datetime, error: str | None = None) -> None:
        target = f"{self.name}:{f.log.path}"
        why = error or "no valid records"
        self.book.record(now, target, f.usable, why, f.stored, len(f.rejected))
        if self.on_file is not None:
            self.on_file(f)

    def health(self) -> list[Health]:
        return self.book.all()


def build(values: Mapping[str, Any], ctx: SourceContext) -> ImportSource | None:
    files = values.get("files") or []
    if not files:
        return None
    return ImportSource(list(files), values.get("kind") or IMPORT_KINDS[0], values.get("run"))


SPEC = SourceSpec(
    name="import",
    summary="training logs on disk: " + ", ".join(f.title for f in FORMATS),
    options={
        "import": (
            Option(
                "--run",
                {"help": "run id for records that name none (required for TensorBoard)"},
            ),
            Option(
                "--kind",
                {
                    "choices": IMPORT_KINDS,
                    "default": "train_metrics",
                    "help": "what the files hold (default train_metrics)",
                },
            ),
            Option(
                "files",
                {
                    "nargs": "*",
                    "metavar": "FILE",
                    "help": ".jsonl/.json, .csv, a TensorBoard events.out.tfevents.* file or a "
                    "directory of them, or a text log (a job's output, a node's kernel log)",
                },
            ),
        )
    },
    build=build,
    recognises=lambda path: True,  # asked last (sources.IMPORTERS): what no other source takes
)
