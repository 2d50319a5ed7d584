"""PyTorch flight-recorder dumps read as they appear: ``ingest``/``serve --flight-recorder DIR
--run RUN``.

On a watchdog timeout every rank of a job dumps within seconds of the others, into one
directory (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``'s folder). ``DIR`` is that folder, or a parent
whose subfolders are one job's dumps each. A folder's dumps are analysed once they have
settled: no new or growing dump for ``SETTLE_S`` seconds (a job whose ranks are still
writing is read whole, not half). Its hang, if any, is
stored as ``import`` stores it (``collect.fr_import``: a ``hangs`` row and a
``collective_hang`` signal on the culprit rank), and the run is derived again; the culprit's
host is placed then, from the run's logs or Slurm node list (``telemetry.store.ranks``). The same
dumps give the same batch ids, so a restart or a second look stores nothing twice. Each folder
has a health row ``flight_recorder:DIR``. A folder is analysed in a child process with deadlines
(``collect.logs.fr_worker``), so a hostile dump can slow only this source's thread, never the
server; the dumps it refuses are logged one line each, with their paths.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from telemetry.collect.logs.flight_recorder import DumpError
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

# Every rank of a job dumps within a second or two of the others (each one's watchdog fires on
# the same collective); 5 s of quiet tells a folder complete, and an SRE's alert waits no
# longer than that plus one look (#58: a hang named within 15 s of its dumps). A folder whose
# ranks were still writing after that is analysed again whole when its dumps change.
SETTLE_S = 5.0
SHOW_REFUSED = 5  # refused dumps logged per folder (the rest counted)
INTERVAL_S = 2.0  # a look is one scandir and a stat per dump (is_dump is remembered)
_Signature = tuple[tuple[str, int, int], ...]


class FlightRecorderSource:
    name = "flight_recorder"
    produces = (Tables, Derive)
    health_rows = True

    def __init__(
        self,
        root: str,
        run: str,
        interval_s: float = INTERVAL_S,
        settle_s: float = SETTLE_S,
        ctx: SourceContext | None = None,
    ) -> None:
        self.root, self.run = os.path.abspath(root), run
        self.interval_s, self.settle_s = interval_s, settle_s
        self.stop = ctx.stop if ctx is not None else None
        self.log = ctx.log if ctx is not None else None
        self.book = HealthBook()
        self._done: dict[str, _Signature] = {}  # folder -> the files last analysed
        self._dumps: dict[tuple[str, int, int], bool] = {}  # (path, size, mtime) -> a dump?
        self.hangs = 0

    def _folders(self) -> list[str]:
        out = [self.root]
        try:
            with os.scandir(self.root) as it:
                out += sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            pass
        return out

    def _signature(self, folder: str) -> tuple[_Signature, float]:
        """The dumps in ``folder`` (path, size, mtime ns) and the newest mtime (s)."""
        from telemetry.collect.logs.flight_recorder import is_dump

        files, newest = [], 0.0
        try:
            with os.scandir(folder) as it:
                entries = [e for e in it if e.is_file(follow_symlinks=False)]
        except OSError:
            return (), 0.0
        for e in entries:
            try:
                st = e.stat()
            except OSError:
                continue
            key = (e.path, st.st_size, st.st_mtime_ns)
            if key not in self._dumps:
                self._dumps[key] = is_dump(e.path)
            if self._dumps[key]:
                files.append(key)
                newest = max(newest, st.st_mtime)
        return tuple(sorted(files)), newest

    def poll(self, now: datetime) -> Iterator[Batch]:
        if not os.path.isdir(self.root):
            why = "no such directory" if not os.path.exists(self.root) else "not a directory"
            self.book.record(now, f"flight_recorder:{self.root}", False, why)
            return
        wall = datetime.now().timestamp()
        found, given_up = False, None
        for folder in self._folders():
            if self.stop is not None and self.stop.is_set():
                break
            sig, newest = self._signature(folder)
            if not sig or wall - newest < self.settle_s:
                continue  # none, or still being written
            if self._done.get(folder) == sig:
                continue
            self._done[folder] = sig
            try:
                tables = self._analyse(folder, [p for p, _, _ in sig])
            except DumpError as exc:  # given up (time): the folder waits for new dumps
                given_up = str(exc)
                self._say(f"flight_recorder: {given_up}")
                continue
            if tables is not None:
                found = True
                self.hangs += 1
                yield tables
        up = given_up is None
        self.book.record(now, f"flight_recorder:{self.root}", up, given_up, self.hangs)
        if found:
            yield Derive((self.run,), run=self.run)

    def _analyse(self, folder: str, files: list[str]) -> Tables | None:
        from telemetry.collect.logs.fr_import import hang_table, signal_frame
        from telemetry.collect.logs.fr_worker import analyse

        stop = self.stop
        hang, errors = analyse(files, stop=stop.is_set if stop is not None else None)
        for line in errors[:SHOW_REFUSED]:  # one line each, with its path
            self._say(f"flight_recorder: {line}")
        if len(errors) > SHOW_REFUSED:
            self._say(f"flight_recorder: ... and {len(errors) - SHOW_REFUSED:,} more refused")
        if hang is None or hang.ts is None:
            return None
        where = folder
        ident = hashlib.sha256(
            f"{self.run}:{hang.process_group}:{hang.seq_id}:{hang.ts}:{len(files)}".encode()
        ).hexdigest()[:40]
        tables = {"hangs": hang_table(hang, self.run, where),
                  "signals": signal_frame(hang, self.run, where)}  # fmt: skip
        return Tables(tables, hang.ts, 0, "fr-" + ident, "a hang")

    def _say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)

    def settle(self, now: datetime, batch: Batch, written: Written) -> None:
        if not written.ok and isinstance(batch, Tables):
            self._done.clear()  # not stored: analysed again next round
            self.book.record(now, f"flight_recorder:{self.root}", False, written.line)

    def health(self) -> list[Health]:
        return self.book.all()


def recognises(path: str) -> bool:
    """A flight-recorder dump, or a directory of them, given to ``import``."""
    from telemetry.collect.logs import flight_recorder

    return flight_recorder.recognises(path)


def build(values: Mapping[str, Any], ctx: SourceContext) -> Any:
    if ctx.command == "import":
        return _dumps_given(values, ctx)
    root = values.get("flight_recorder")
    if not root:
        return None
    if not values.get("run"):
        raise FactoryFloorError("--flight-recorder needs --run: the run the dumps belong to")
    if not os.path.isdir(root):
        raise FactoryFloorError(f"--flight-recorder {root}: not a directory")
    interval_s = min(INTERVAL_S, ctx.interval_s or INTERVAL_S)
    return FlightRecorderSource(root, values["run"], interval_s, ctx=ctx)


def _dumps_given(values: Mapping[str, Any], ctx: SourceContext) -> Any:
    """The dumps ``import`` handed over (``files``, what ``recognises`` took), read once
    (``fr_import.DumpImport``); None when none was."""
    files = list(values.get("files") or [])
    if not files:
        return None
    if not values.get("run"):
        why = "flight-recorder dumps do not name their run; add --run"
        raise FactoryFloorError(f"{files[0]}: {why}")
    if ctx.stored is None:
        raise FactoryFloorError("flight-recorder dumps are imported into a store: give --store")
    from telemetry.collect.logs.fr_import import DumpImport

    return DumpImport(files, values["run"], values.get("ranks_per_node"), ctx.stored)


SPEC = SourceSpec(
    name="flight_recorder",
    summary="PyTorch flight-recorder dumps, read as a job's ranks write them",
    options={
        cmd: (
            Option("--flight-recorder", {"metavar": "DIR", "help": "a folder PyTorch's flight "
                   "recorder dumps into (or their parent): each job's hang, as it lands"}),
            RUN_OPTION,
        )  # fmt: skip
        for cmd in ("ingest", "serve")
    },
    build=build,
    ask="--flight-recorder DIR",
    recognises=recognises,
)
