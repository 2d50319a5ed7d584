"""Every source of data Factory Floor stores, registered in one place: ``SOURCES``.

A source (``ingest.seam.Source``) is a named thing that, polled at a clock time it is given,
yields typed batches (``Round``, ``Records``, ``Tables``) for a ``BatchSink`` (the store writer,
the server's ingest service, the forwarder), learns what became of each, and reports its
health, one row per thing it watches in the ``targets`` table, which the dashboard's target
view reads. Its registration (``ingest.seam.SourceSpec``) gives its name, a summary, its
command-line options per command and how to build it from their values. The commands read this
list: ``ingest`` and ``serve`` add every registered source's options, build the sources that
were asked for and run each with ``ingest.daemon.run_rounds`` into their sink.

How to add a source (a tailed training log, ``--logs GLOB``, is the example)
-----------------------------------------------------------------------------
1. One package, ``telemetry/collect/logs/`` (a source imports the ingest and the store, never
   another source nor the replay engine; keep heavy imports inside functions, the command
   line's parser imports it):

   - a class with ``name = "logs"``, ``produces = (Records,)`` and ``health_rows = True`` (the
     loop stores ``health()`` after each round), and
     ``poll(now)``: the ``Records`` batches of the lines written since the last poll, each with
     ``target=f"logs:{path}"`` and a ``batch_id`` made of the file's identity and offset, so a
     batch sent twice is stored once;
     ``settle(now, batch, written)``: advance that file's offset only when ``written.ok``, so a
     failed write is read again next round; keep health with a ``seam.HealthBook``;
     ``health()``: ``self.book.all()``.
   - ``build(values, ctx)``: the source from its options' values (``values["logs"]``), or None
     when none was given; ``ctx`` has the command, interval, timeout and log function. Raise
     ``FactoryFloorError`` with a one-line reason for bad input.
   - ``SPEC = SourceSpec("logs", "training and kernel logs, tailed", options={"ingest":
     (Option("--logs", {"action": "append", "default": [], "metavar": "GLOB", "help": ...}),),
     "serve": (...same...)}, build=build, ask="--logs GLOB")``.
2. One registration line in ``SOURCES`` below: ``logs.SPEC,``.
3. Its tests, and an entry for it in ``tests/test_sources.py`` (that test fails for a registered
   source it cannot build, or one that does not show up in the targets table after a round).

The checkpoint-directory watcher (``--checkpoints TIER=PATH``, ``collect.checkpoints``) is the
same shape: ``poll`` lists new checkpoint directories as ``Tables``. Where two sources are given
together they never import each other: the command composes them (``import`` derives the logs
and the checkpoint directories once, after both). A new ``import`` format is not a
source: it is one ``LogFormat`` in ``collect.logs.formats.FORMATS``. A push source (posted
records) has no options and an empty ``poll``: the code that receives the data writes each batch and
settles it (see ``ingest.posted``).

Nothing here imports a source's heavy parts: ``factoryfloor --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from telemetry.collect.checkpoints import ckpt_source
from telemetry.collect.dcgm import scrape_source
from telemetry.collect.logs import cluster_source, fr_source, import_source
from telemetry.collect.prometheus import prom_source
from telemetry.collect.slurm import slurm_source
from telemetry.errors import FactoryFloorError
from telemetry.ingest import posted
from telemetry.ingest.seam import Option, Source, SourceContext, SourceSpec
from telemetry.replay import source as replay_source

SOURCES: tuple[SourceSpec, ...] = (
    scrape_source.SPEC,
    import_source.SPEC,
    posted.SPEC,
    replay_source.SPEC,
    cluster_source.SPEC,
    ckpt_source.SPEC,
    prom_source.SPEC,
    slurm_source.SPEC,
    fr_source.SPEC,
)


# The sources ``import`` hands its paths to, asked in this order: the first whose recogniser
# takes a path reads it (flight-recorder dumps, then text logs; the records source takes the
# rest, and says what it cannot read).
IMPORTERS = ("flight_recorder", "cluster", "import")


def claim(paths: list[str]) -> dict[str, list[str]]:
    """Per importing source's name, the ``paths`` its recogniser takes (``IMPORTERS``)."""
    out: dict[str, list[str]] = {name: [] for name in IMPORTERS}
    for path in paths:
        for name in IMPORTERS:
            recognises = get(name).recognises
            if recognises is not None and recognises(path):
                out[name].append(path)
                break
    return out


def names() -> list[str]:
    return [s.name for s in SOURCES]


def get(name: str) -> SourceSpec:
    for spec in SOURCES:
        if spec.name == name:
            return spec
    raise KeyError(f"no source {name!r}; registered: {', '.join(names())}")


def options(command: str) -> list[tuple[SourceSpec, Option]]:
    """Every registered source's options on ``command``, in registration order."""
    return [(spec, opt) for spec in SOURCES for opt in spec.options.get(command, ())]


def _shared() -> dict[str, frozenset[str]]:
    flags: dict[tuple[str, str], set[str]] = {}
    for spec in SOURCES:
        for command, opts in spec.options.items():
            for opt in opts:
                flags.setdefault((command, opt.flag), set()).add(spec.name)
    out: dict[str, set[str]] = {}
    for (command, flag), names in flags.items():
        if len(names) > 1:
            out.setdefault(command, set()).add(flag)
    return {command: frozenset(f) for command, f in out.items()}


# Per command, the flags several sources register on it (``--since``): one option, read by each.
SHARED = _shared()


def dest(spec: SourceSpec, opt: Option, command: str) -> str:
    """Where the command line's parser keeps the value of ``opt`` on ``command``: its source's
    own place, or one place for a flag several sources share (each reads it; none is asked
    for by it)."""
    shared = opt.flag in SHARED.get(command, ())
    return f"shared.{opt.key}" if shared else f"{spec.name}.{opt.key}"


def values(command: str, parsed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per source name, its options' values on ``command`` out of ``parsed`` (by ``dest``)."""
    out: dict[str, dict[str, Any]] = {}
    for spec, opt in options(command):
        out.setdefault(spec.name, {})[opt.key] = parsed.get(dest(spec, opt, command))
    return out


def asked(command: str, given: Mapping[str, Mapping[str, Any]]) -> list[SourceSpec]:
    """The sources some option of which was given a value on ``command``, or that the command
    gave values itself (``import`` hands each importer the paths it recognised)."""
    shared = {f.lstrip("-").replace("-", "_") for f in SHARED.get(command, ())}
    return [
        spec
        for spec in SOURCES
        if (spec.options.get(command) or spec.recognises is not None)
        and any(v for k, v in given.get(spec.name, {}).items() if k not in shared)
    ]


def asking(command: str) -> str:
    """How a user asks for a source on ``command``: "--target or a --targets-file"."""
    return ", or ".join(s.ask for s in SOURCES if s.options.get(command) and s.ask)


def build(
    command: str, given: Mapping[str, Mapping[str, Any]], ctx: SourceContext
) -> list[Source]:
    """The sources asked for on ``command``, built from their options' values. A shared
    option given while no source that reads it is asked for is an error naming them."""
    chosen = asked(command, given)
    for flag in sorted(SHARED.get(command, ())):
        readers = [s for s in SOURCES if any(o.flag == flag for o in s.options.get(command, ()))]
        key = flag.lstrip("-").replace("-", "_")
        read = any(r in chosen for r in readers)
        if any(given.get(s.name, {}).get(key) for s in readers) and not read:
            raise FactoryFloorError(f"{flag} needs {' or '.join(s.ask for s in readers)}")
    out = []
    for spec in chosen:
        if spec.build is not None and (src := spec.build(given[spec.name], ctx)) is not None:
            out.append(src)
    return out
