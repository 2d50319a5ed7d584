"""``factoryfloor import``: training metrics, run events, text logs, flight-recorder dumps and
checkpoint directories into a store.

The command composes the sources; it reads and writes no data of its own. Each path given is
handed to the sources' own recognisers (``sources.claim``): flight-recorder dumps to theirs,
text logs (a job's ``slurm-N.out``, a node's kernel log) to the cluster source, the rest to the
records source. Every source is built (record files are read and checked then) before the store
is opened, so a typo writes nothing; text logs are read block by block, so a log's length does
not grow memory; its ranks' failure lines do (about 14 KB a rank in a full cascade:
docs/security-and-serving.md). Then one round of each into the store writer, in registration
order; the logs and the checkpoint directories are derived once, after both
(``DERIVED_TOGETHER``). Printed: each source's account (``TELL``: records stored, signals by
kind, checkpoint lines, the first rejected or unreadable lines with their ``file:line``, a
hang's story), checkpoints per tier, and every interruption found with its cause."""

from __future__ import annotations

from typing import Any

from app.commands.common import err, log
from app.settings import Settings
from telemetry import sources
from telemetry.collect.logs.logline import is_kernel_log
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import collect, collect_overlapped, utcnow
from telemetry.ingest.seam import SourceContext

SHOW_REJECTIONS = 5
SHOW_INTERRUPTIONS = 20
# The sources whose evidence is derived once, after all of them: a run's logs and its
# checkpoint directories (the restores the logs tell are judged against the tiers' roots).
# Every other source's derivation follows its own batches, as it yields them.
DERIVED_TOGETHER = ("cluster", "checkpoints")


def _split(s: Settings) -> dict[str, dict[str, Any]]:
    """The sources' values, each importer given the paths its recogniser took (text logs to
    the cluster source, flight-recorder dumps to theirs, the rest to the records source) and
    the run they belong to."""
    given = {name: dict(v) for name, v in s.sources.items()}
    imp, cl = given.setdefault("import", {}), given.setdefault("cluster", {})
    claimed = sources.claim(list(imp.get("files") or []))  # each source's own recogniser
    text = claimed["cluster"]
    if text and (imp.get("kind") or "train_metrics") != "train_metrics":
        raise FactoryFloorError(f"{text[0]}: a text log; --kind applies to .jsonl, .csv files")
    imp["files"] = claimed["import"]
    cl["files"], cl["run"] = text, imp.get("run")
    given.setdefault("checkpoints", {})["run"] = imp.get("run")
    given["flight_recorder"] = {"files": claimed["flight_recorder"], "run": imp.get("run"),
                                "ranks_per_node": cl.get("ranks_per_node")}  # fmt: skip
    return given


def run(s: Settings) -> int:
    from telemetry.ingest.writer import Composing, StoreWriter
    from telemetry.store import open_store

    assert s.store is not None  # the parser requires it
    given = _split(s)
    if not (
        given["flight_recorder"]["files"]
        or given["import"]["files"]
        or given["cluster"]["files"]
        or given["checkpoints"].get("checkpoints")
        or given.get("slurm", {}).get("slurm")
    ):
        raise FactoryFloorError("give at least one FILE or --checkpoints TIER=PATH, or --slurm")
    opened: list[Any] = []  # the store, once open: what a source reads before it writes
    ctx = SourceContext("import", s.interval_s, s.timeout_s, log, store=s.store,
                        stored=lambda: opened[0])  # fmt: skip
    built = sources.build("import", given, ctx)  # each reads and checks its input first
    with open_store(s.store) as store:
        opened.append(store)
        sink = Composing(StoreWriter(store))
        empty = _read(built, sink)
        if any(src.name in DERIVED_TOGETHER for src in built):
            _clock_hint(store, given["cluster"].get("run"), given["cluster"].get("log_tz"))
        _show_derived(store, sink.derived)
    if empty:
        return err(f"nothing stored from {', '.join(empty)}: no valid records")
    return 0


def _read(built: list[Any], sink: Any) -> list[str]:
    """One round of each source into ``sink``, in order, the ones ``DERIVED_TOGETHER`` derived
    once after the last of them; each one's account printed (``TELL``). The paths that gave
    nothing."""
    empty: list[str] = []
    later = []
    for source, after in zip(built, [*built[1:], None], strict=True):
        sink.holding = source.name in DERIVED_TOGETHER
        # a source that never reads the store while it makes batches is written beside its
        # next batch being made (a log: the parse beside the store's writes, #56)
        (collect_overlapped if getattr(source, "overlap_writes", False) else collect)(
            source, sink, utcnow())
        if after is None or after.name not in DERIVED_TOGETHER:
            sink.flush()  # the group read: its one derivation
        tell, at_once = TELL[source.name]
        if at_once:
            empty += tell(source)
        else:
            later.append((tell, source))
    for tell, source in later:
        empty += tell(source)
    for source in built:
        if (close := getattr(source, "close", None)) is not None:
            close()
    return empty


def _show_dumps(source: Any) -> list[str]:
    """Print the hang the flight-recorder dumps show, and its story; the dumps when none was
    read."""
    got = source.got
    print(f"{got.where}: {got.read:,} flight-recorder dumps of {got.ranks:,} ranks read")
    for why in got.errors[:SHOW_REJECTIONS]:
        print(f"  unreadable: {why}")
    if len(got.errors) > SHOW_REJECTIONS:
        print(f"  ... and {len(got.errors) - SHOW_REJECTIONS:,} more unreadable")
    if got.hang is None and not got.read:
        print("  no hang can be told: no dump was read")
        return list(source.paths)
    if got.hang is None:
        among = " among the dumps read" if got.errors else ""
        print(f"  no hang{among}: every process group's ranks completed the same collectives")
        return []
    again = " (already imported)" if got.duplicate else ""
    print(f"  hang{again}: {got.hang.story()}")
    frames = got.hang.culprit_frames
    for frame in ([f for f in frames if "/torch/" not in f] or frames)[:4]:
        print(f"    the culprit's last collective was called from {frame}")
    return []


def _show_records(source: Any) -> list[str]:
    """Print each record file's account; the files that gave nothing."""
    for f in source.files:
        _show(f, source.kind)
    return [f.log.path for f in source.files if not f.usable]


def _show(f: Any, kind: str) -> None:
    again = " (already imported: nothing written)" if f.duplicates else ""
    print(f"{f.log.path}: {f.stored:,} {kind} records stored, {len(f.rejected):,} rejected{again}")
    for line in f.rejected[:SHOW_REJECTIONS]:
        print(f"  rejected {line}")
    if len(f.rejected) > SHOW_REJECTIONS:
        print(f"  ... and {len(f.rejected) - SHOW_REJECTIONS:,} more rejected")
    if f.ignored:
        print("  ignored: " + ", ".join(f"{k} ({n:,})" for k, n in sorted(f.ignored.items())))
    if f.scores or f.scores_again:
        again = " (already imported)" if f.scores_again else ""
        print(f"  {f.scores:,} straggler scores (min/median/max over the ranks) stored{again}")


def _show_cluster(source: Any) -> list[str]:
    """Print what each text log and checkpoint directory gave; the logs that gave nothing."""
    empty = []
    for a in source.accounts():
        sig = ", ".join(f"{k} {n:,}" for k, n in sorted(a.signals.items())) or "none"
        again = (
            " (already imported: nothing written)" if a.duplicate_blocks and not a.metrics else ""
        )
        print(
            f"{a.path}: {a.lines:,} lines: {a.metrics:,} train_metrics records stored, "
            f"signals: {sig}, {a.checkpoint_events:,} checkpoint lines, "
            f"{a.unrecognised:,} lines not recognised{again}"
        )
        if a.needs_run:
            print(f"  its progress lines name no run ({a.needs_run:,} in its first block): "
                  "nothing from it was stored; import it again with --run NAME")
            empty.append(a.path)
            continue
        if a.unrecognised and a.unread:
            print(f"  not recognised (the first {len(a.unread)} of {a.unrecognised:,}):")
            for line in a.unread:
                print(f"    {line}")
        if a.rank_perf or a.untimed_rank_perf:
            skipped = f" ({a.untimed_rank_perf:,} with no time before them skipped)" if (
                a.untimed_rank_perf) else ""
            print(f"  {a.rank_perf:,} per-rank timing scores (slow ranks) stored{skipped}")
        if a.untimed_metrics:
            print(f"  {a.untimed_metrics:,} progress lines with no time before them skipped")
        if a.assumed_year is not None:
            print(f"  times without a year read as in {a.assumed_year} ({a.year_from}); "
                  "give another with --year YYYY")
        if a.untimed:
            more = ", ..." if a.untimed > len(a.untimed_at) else ""
            print(f"  {a.untimed:,} signal lines without a wall-clock time (the log gives no "
                  f"date, or only seconds since boot): stored with no time, at "
                  f"{', '.join(a.untimed_at)}{more}")
        for p in a.problems[:SHOW_REJECTIONS]:  # a time that is no data: read, not believed
            print(f"  {'not recognised' if p.endswith(': not data') else 'unreadable'} {p}")
        if len(a.problems) > SHOW_REJECTIONS:
            print(f"  ... and {len(a.problems) - SHOW_REJECTIONS:,} more unreadable lines")
        if not (a.metrics or a.signals or a.checkpoint_events or a.duplicate_blocks
                or a.rank_perf or a.untimed):  # untimed: understood, said above, not an error
            if not a.problems and is_kernel_log(a.path):  # a quiet node: nothing went wrong
                print(f"  nothing of note in {a.path} (a kernel log: no XID or failure line)")
            else:
                empty.append(a.path)
    return empty


def _show_checkpoints(source: Any) -> list[str]:
    """Print what each checkpoint directory gave."""
    for tier, root in source.checkpoints:
        counts = source.checkpoint_counts.get(tier, {})
        found = ", ".join(f"{n:,} {st}" for st, n in sorted(counts.items())) or "none found"
        print(f"checkpoints {tier}={root}: {found}")
    if source.in_progress:
        print(f"  {source.in_progress:,} checkpoint(s) still being written: not stored yet")
    for p in source.checkpoint_problems[:SHOW_REJECTIONS]:
        print(f"  {p}")
    return []


def _clock_hint(store: Any, run: str | None, tz: str | None) -> None:
    """Say so when the job log's times and its checkpoint files' disagree by whole hours."""
    from telemetry.queries.checkpoints import log_clock_offset_h

    hours = log_clock_offset_h(store, run) if run else None
    if hours:
        way = "behind" if hours > 0 else "ahead of"
        zone = f" (read as {tz})" if tz else " (read as UTC)"
        print(f"  note: the job log's times{zone} are {abs(hours)} h {way} its checkpoint "
              "files' times: was it written in local time? give its zone with --log-tz ZONE "
              "(e.g. --log-tz Europe/Berlin) and import again into a new store")


def _show_slurm(source: Any) -> list[str]:
    """One line per Slurm command: what it gave, or why not (an error when nothing was read)."""
    if not any(h.up for h in source.health()):
        down = "; ".join(h.error or "down" for h in source.health())
        raise FactoryFloorError(f"nothing read from Slurm: {down}")
    for h in source.health():
        what = h.target.split(":", 1)[1]
        form = source.client.last_form.get(what, "")
        if h.up:
            print(f"slurm {what} ({form}): {h.rows:,} rows" + (
                f", {h.rejected:,} unreadable or of an unknown state" if h.rejected else ""))
        else:
            print(f"slurm {what}: DOWN: {h.error}")
    c = source.counts
    print(f"slurm: {c.get('jobs changed', 0):,} job rows stored, "
          f"{c.get('node events', 0):,} node event(s)")  # fmt: skip
    if source.unknown_states:
        print("  unknown states kept as Slurm said them: " + ", ".join(
            f"{k} ({n:,})" for k, n in sorted(source.unknown_states.items())))  # fmt: skip
    return []


# How each importing source's account is printed, by its registered name, and whether at once
# (True) or after every source was read (the logs and checkpoint directories, after the
# derivation they share): the printer returns the paths that gave nothing.
TELL: dict[str, tuple[Any, bool]] = {
    "import": (_show_records, True),
    "slurm": (_show_slurm, True),
    "flight_recorder": (_show_dumps, True),
    "cluster": (_show_cluster, False),
    "checkpoints": (_show_checkpoints, False),
}


def _show_derived(store: Any, derived: list[Any]) -> None:
    from telemetry.queries import data_extent
    from telemetry.queries.failures import interruption_list

    ext = data_extent(store)
    for d in derived:
        print(f"run {d.run_id}: {d.interruptions} interruption(s) inferred from the signals")
        if ext is None or not d.interruptions:
            continue
        df = interruption_list(store, d.run_id, ext, limit=SHOW_INTERRUPTIONS)
        for r in df[df["source"] == "inferred"].sort_values("ts").itertuples():
            conf = "" if r.confidence != r.confidence else f", confidence {r.confidence:.0%}"
            when = "time unknown" if r.ts != r.ts else f"{r.ts:%Y-%m-%d %H:%M:%S}"  # NaT
            print(f"  {when} {r.component} ({r.category}{conf}): {r.description}")
