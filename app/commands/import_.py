"""``factoryfloor import``: training metrics, run events, text logs and checkpoint directories
into a store.

Record files (.jsonl, .csv, TensorBoard) are read and checked (the import source does it when
built) before the store is opened, so a typo writes nothing. Text logs (a job's
``slurm-N.out``, a node's kernel log) and ``--checkpoints TIER=PATH`` directories are read by
the cluster source, block by block, so a log's length does not grow memory; its ranks' failure
lines do (about 14 KB a rank in a full cascade: docs/security-and-serving.md). Then one round
of each into the store writer, and the interruptions of the runs touched are derived. Printed:
each file's account (records stored, signals by kind, checkpoint lines, the first rejected or
unreadable lines with their ``file:line``), checkpoints per tier, and every interruption found
with its cause."""

from __future__ import annotations

from functools import partial
from typing import Any

from app.commands.common import err, log
from app.settings import Settings
from telemetry import sources
from telemetry.collect.checkpoints.ckpt_source import CheckpointSource
from telemetry.collect.logs.cluster_source import ClusterSource
from telemetry.collect.logs.import_source import ImportedFile, ImportSource
from telemetry.collect.logs.logline import is_kernel_log
from telemetry.collect.slurm.slurm_source import SlurmSource
from telemetry.errors import FactoryFloorError
from telemetry.ingest.daemon import collect, collect_overlapped, utcnow
from telemetry.ingest.seam import Derive, SourceContext

SHOW_REJECTIONS = 5
SHOW_INTERRUPTIONS = 20


def _split(s: Settings) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The sources' values with the text logs moved from the import source to the cluster's,
    and the PyTorch flight-recorder dumps (files, or directories of them) taken out."""
    given = {name: dict(v) for name, v in s.sources.items()}
    imp, cl = given.setdefault("import", {}), given.setdefault("cluster", {})
    claimed = sources.claim(list(imp.get("files") or []))  # each source's own recogniser
    dumps, text = claimed["flight_recorder"], claimed["cluster"]
    if dumps and not imp.get("run"):
        raise FactoryFloorError(
            f"{dumps[0]}: flight-recorder dumps do not name their run; add --run"
        )
    if text and (imp.get("kind") or "train_metrics") != "train_metrics":
        raise FactoryFloorError(f"{text[0]}: a text log; --kind applies to .jsonl, .csv files")
    imp["files"] = claimed["import"]
    cl["files"], cl["run"] = text, imp.get("run")
    given.setdefault("checkpoints", {})["run"] = imp.get("run")
    return given, dumps


def run(s: Settings) -> int:
    from telemetry.ingest.writer import StoreWriter
    from telemetry.store import open_store

    assert s.store is not None  # the parser requires it
    given, dumps = _split(s)
    unread_dumps: list[str] = []
    if not (
        dumps
        or given["import"]["files"]
        or given["cluster"]["files"]
        or given["checkpoints"].get("checkpoints")
        or given.get("slurm", {}).get("slurm")
    ):
        raise FactoryFloorError("give at least one FILE or --checkpoints TIER=PATH, or --slurm")
    ctx = SourceContext("import", s.interval_s, s.timeout_s, log, store=s.store)
    built = sources.build("import", given, ctx) if _any_source(given) else []
    records = [b for b in built if isinstance(b, ImportSource)]
    cluster = [b for b in built if isinstance(b, ClusterSource)]
    ckpts = [b for b in built if isinstance(b, CheckpointSource)]
    for composed in [*cluster, *ckpts]:
        composed.derive = False  # one derivation for both, after both (_derive_logs)
    slurm = [b for b in built if isinstance(b, SlurmSource)]
    for source in records:
        source.on_file = partial(_show, kind=source.kind)
    derived: list[Any] = []
    with open_store(s.store) as store:
        writer = StoreWriter(store)
        for source in records:
            collect(source, writer, utcnow())
        for source in cluster:
            collect_overlapped(source, writer, utcnow())  # the parse beside the store's writes
            source.close()
        for ckpt in ckpts:
            collect(ckpt, writer, utcnow())
        if cluster or ckpts:
            derived = _derive_logs(writer, given, cluster, ckpts) or derived
        for source in slurm:
            for w in collect(source, writer, utcnow()):
                if isinstance(w.report, list):
                    derived = w.report
            if not any(h.up for h in source.health()):
                down = "; ".join(h.error or "down" for h in source.health())
                raise FactoryFloorError(f"nothing read from Slurm: {down}")
            _show_slurm(source)
        if dumps:
            run = given["import"].get("run")
            assert run is not None  # _split requires it
            if per_node := given["cluster"].get("ranks_per_node"):
                from telemetry.store.run_meta import remember_ranks_per_node

                remember_ranks_per_node(store, run, per_node)
            stored, read = _import_hangs(store, writer, dumps, run)
            if stored:
                derived = writer.write(Derive(runs=(run,))).report or derived
            unread_dumps = [] if read else dumps
        empty = [f.log.path for src in records for f in src.files if not f.usable] + unread_dumps
        for source in cluster:
            empty += _show_cluster(source)
        for ckpt in ckpts:
            _show_checkpoints(ckpt)
        if cluster or ckpts:
            _clock_hint(store, given["cluster"].get("run"), given["cluster"].get("log_tz"))
        _show_derived(store, derived)
    if empty:
        return err(f"nothing stored from {', '.join(empty)}: no valid records")
    return 0


def _derive_logs(
    writer: Any, given: dict[str, dict[str, Any]], cluster: list[ClusterSource],
    ckpts: list[CheckpointSource],
) -> list[Any]:  # fmt: skip
    """The logs and the checkpoint directories composed into one ``Derive`` batch, as each
    source alone would send it: for the runs they touched (None: every run), with the tier
    roots given, when they stored something or a run was named. What was derived."""
    run = given["cluster"].get("run")
    touched = set().union(*(s.runs_touched for s in [*cluster, *ckpts]))
    produced = any(s.produced for s in cluster) or any(c.rows for c in ckpts)
    if not (produced or run):
        return []
    roots: dict[str, list[str]] = {}
    for ckpt in ckpts:
        for tier, paths in ckpt.roots().items():
            roots.setdefault(tier, []).extend(paths)
    per_node = given["cluster"].get("ranks_per_node")
    batch = Derive(tuple(sorted(touched)) or None, roots, run, per_node)
    return writer.write(batch).report or []


def _any_source(given: dict[str, dict[str, Any]]) -> bool:
    return bool(
        given["import"]["files"]
        or given["cluster"]["files"]
        or given["checkpoints"].get("checkpoints")
        or given.get("slurm", {}).get("slurm")
    )


def _import_hangs(store: Any, writer: Any, paths: list[str], run: str) -> tuple[bool, bool]:
    """Store the hang the flight-recorder dumps at ``paths`` show, and print its story;
    whether a new one was stored (the run's interruptions are then derived again), and
    whether any dump was read."""
    from telemetry.collect.logs.fr_import import import_dumps

    got = import_dumps(store, writer.write, paths, run)
    print(f"{got.where}: {got.read:,} flight-recorder dumps of {got.ranks:,} ranks read")
    for why in got.errors[:SHOW_REJECTIONS]:
        print(f"  unreadable: {why}")
    if len(got.errors) > SHOW_REJECTIONS:
        print(f"  ... and {len(got.errors) - SHOW_REJECTIONS:,} more unreadable")
    if got.hang is None and not got.read:
        print("  no hang can be told: no dump was read")
        return False, False
    if got.hang is None:
        among = " among the dumps read" if got.errors else ""
        print(f"  no hang{among}: every process group's ranks completed the same collectives")
        return False, True
    again = " (already imported)" if got.duplicate else ""
    print(f"  hang{again}: {got.hang.story()}")
    frames = got.hang.culprit_frames
    for frame in ([f for f in frames if "/torch/" not in f] or frames)[:4]:
        print(f"    the culprit's last collective was called from {frame}")
    return not got.duplicate, True


def _show(f: ImportedFile, kind: str) -> None:
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


def _show_cluster(source: ClusterSource) -> list[str]:
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
            print(f"  {a.rank_perf:,} per-rank timing scores (slow ranks){skipped}")
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


def _show_checkpoints(source: CheckpointSource) -> None:
    """Print what each checkpoint directory gave."""
    for tier, root in source.checkpoints:
        counts = source.checkpoint_counts.get(tier, {})
        found = ", ".join(f"{n:,} {st}" for st, n in sorted(counts.items())) or "none found"
        print(f"checkpoints {tier}={root}: {found}")
    if source.in_progress:
        print(f"  {source.in_progress:,} checkpoint(s) still being written: not stored yet")
    for p in source.checkpoint_problems[:SHOW_REJECTIONS]:
        print(f"  {p}")


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


def _show_slurm(source: SlurmSource) -> None:
    """One line per Slurm command: what it gave, or why not."""
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
            print(f"  {r.ts:%Y-%m-%d %H:%M:%S} {r.component} ({r.category}{conf}): {r.description}")
