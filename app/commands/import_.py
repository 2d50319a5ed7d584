"""``factoryfloor import``: training metrics or run events from log files into a store.

Every file is read and checked (the import source does it when built) before the store is
opened, so a typo writes nothing. Then one round of the import source into the store writer;
each file's account is printed as its last chunk is stored: records stored, the first
rejections with their ``file:line``, tags ignored, or "already imported"."""

from __future__ import annotations

from functools import partial

from app.commands.common import err, log
from app.settings import Settings
from telemetry import sources
from telemetry.collect.daemon import collect, utcnow
from telemetry.collect.import_source import ImportedFile, ImportSource
from telemetry.collect.seam import SourceContext

SHOW_REJECTIONS = 5


def run(s: Settings) -> int:
    from telemetry.collect.writer import StoreWriter
    from telemetry.store import open_store

    assert s.store is not None  # the parser requires it
    ctx = SourceContext("import", s.interval_s, s.timeout_s, log)
    (source,) = sources.build("import", s.sources, ctx)  # the parser requires files
    assert isinstance(source, ImportSource)
    source.on_file = partial(_show, kind=source.kind)
    with open_store(s.store) as store:
        collect(source, StoreWriter(store), utcnow())
    empty = [f.log.path for f in source.files if not f.usable]
    if empty:
        return err(f"nothing stored from {', '.join(empty)}: no valid records")
    return 0


def _show(f: ImportedFile, kind: str) -> None:
    again = " (already imported: nothing written)" if f.duplicates else ""
    print(f"{f.log.path}: {f.stored:,} {kind} records stored, {len(f.rejected):,} rejected{again}")
    for line in f.rejected[:SHOW_REJECTIONS]:
        print(f"  rejected {line}")
    if len(f.rejected) > SHOW_REJECTIONS:
        print(f"  ... and {len(f.rejected) - SHOW_REJECTIONS:,} more rejected")
    if f.ignored:
        print("  ignored: " + ", ".join(f"{k} ({n:,})" for k, n in sorted(f.ignored.items())))
