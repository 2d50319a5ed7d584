"""The log formats ``factoryfloor import`` reads: a registry of name -> how to recognise a path
-> reader.

A format is one ``LogFormat`` in ``FORMATS``; the one whose ``recognises`` accepts a path reads
it (at most one does: each says exactly which paths are its own). Adding a format (say
plain-text training logs) is a reader returning ``importers.FileRecords`` plus one entry here;
the import command, its error messages and the import source pick it up from this list.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from telemetry.collect.logs.tbfiles import TB_PREFIX
from telemetry.errors import FactoryFloorError

if TYPE_CHECKING:  # the readers are imported when a file is read, not with the parser
    from telemetry.collect.logs.importers import FileRecords


@dataclass(frozen=True)
class LogFormat:
    name: str
    title: str  # in messages: "TensorBoard"
    expected: str  # how a user names it: ".csv", "a TensorBoard ... file or directory"
    recognises: Callable[[str], bool]  # an existing path, file or directory
    read: Callable[[str, str | None], FileRecords]  # (path, --run) -> records
    kinds: tuple[str, ...] | None = None  # the record kinds it can hold (None: any)
    names_run: bool = True  # False: records never say their run, so --run is required


def _name(path: str) -> str:
    return os.path.basename(os.path.normpath(path))


def _tensorboard_path(path: str) -> bool:
    return os.path.isdir(path) or _name(path).startswith(TB_PREFIX)


def _ext(path: str) -> str:
    return os.path.splitext(_name(path))[1].lower()


def _by_extension(*exts: str) -> Callable[[str], bool]:
    """A file (not a TensorBoard one) whose name ends in one of ``exts``."""
    return lambda p: not _tensorboard_path(p) and _ext(p) in exts


def _journal_export(path: str) -> bool:
    """``journalctl -o json`` output (a node's journal, read as a text log): its first entry
    carries journald's ``__REALTIME_TIMESTAMP`` and ``MESSAGE`` fields. Only a regular file is
    looked into: opening a FIFO would block, and the importer refuses it in one line."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"__REALTIME_TIMESTAMP"' in head \
        and b'"MESSAGE"' in head


def _records_json(path: str) -> bool:
    return _by_extension(".jsonl", ".ndjson", ".json")(path) and not _journal_export(path)


def _fill_run(log: FileRecords, run: str | None) -> FileRecords:
    """``log`` with ``run`` filled into the records (and straggler score rows) that name none."""
    for rec in log.records:
        if run and isinstance(rec, dict) and rec.get("run") is None:
            rec["run"] = run
    log.rank_perf[:] = [(r or run, row) for r, row in log.rank_perf]
    return log


def _jsonl(path: str, run: str | None) -> FileRecords:
    from telemetry.collect.logs.importers import read_jsonl

    return _fill_run(read_jsonl(path), run)


def _csv(path: str, run: str | None) -> FileRecords:
    from telemetry.collect.logs.importers import read_csv

    return _fill_run(read_csv(path), run)


def _tensorboard(path: str, run: str | None) -> FileRecords:
    from telemetry.collect.logs.importers import read_tensorboard

    assert run is not None  # names_run=False: checked by format_for
    return read_tensorboard(path, run)


FORMATS: tuple[LogFormat, ...] = (
    LogFormat(
        "jsonl",
        "JSON lines",
        ".jsonl, .json",
        _records_json,
        _jsonl,
    ),
    LogFormat("csv", "CSV", ".csv", _by_extension(".csv"), _csv),
    LogFormat(
        "tensorboard",
        "TensorBoard",
        "a TensorBoard events.out.tfevents.* file or directory",
        _tensorboard_path,
        _tensorboard,
        kinds=("train_metrics",),
        names_run=False,
    ),
)


def format_for(path: str, kind: str, run: str | None) -> LogFormat:
    """The format that reads ``path`` as records of ``kind``; FactoryFloorError saying why
    none does (missing, unknown, a kind or a missing --run the format cannot take)."""
    if not os.path.exists(path):
        raise FactoryFloorError(f"{path}: no such file or directory")
    for fmt in FORMATS:
        if fmt.recognises(path):
            files = f"{path}: {fmt.title} files"
            if fmt.kinds is not None and kind not in fmt.kinds:
                raise FactoryFloorError(f"{files} hold {' or '.join(fmt.kinds)} only")
            if not fmt.names_run and not run:
                raise FactoryFloorError(f"{files} do not name their run; add --run")
            return fmt
    expected = [f.expected for f in FORMATS]
    raise FactoryFloorError(
        f"{path}: unknown format {_ext(path) or '(no extension)'}; expected "
        f"{', '.join(expected[:-1])}, or {expected[-1]}"
    )


def is_text_log(path: str) -> bool:
    """A plain text log (a job's output, a kernel log): an existing regular file no record
    format claims. ``collect.logs.cluster_source`` reads those."""
    return os.path.isfile(path) and not any(fmt.recognises(path) for fmt in FORMATS)


def read_log(path: str, kind: str, run: str | None) -> FileRecords:
    """``path`` read by its format (``format_for``'s errors, or the reader's)."""
    return format_for(path, kind, run).read(path, run)
