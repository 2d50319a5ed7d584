"""The ``factoryfloor`` command line: the parser and the dispatch to ``app.commands``.

The composition root: the commands wire telemetry (store, sources, replay) to the dashboard, so
they live on the app side of the one-way door (telemetry never imports app). Each option takes
its default and help from ``app.settings.Settings``; the registered sources
(``telemetry.sources``) add their own options to ``ingest``, ``serve`` and ``import``. The
parsed line becomes one ``Settings`` that the command gets.

Every failure a user can cause (wrong arguments, a locked or missing store, an unknown scenario,
a port in use) ends in one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from importlib import import_module
from typing import Any, NoReturn

from app import settings as st
from app.commands.common import err
from app.settings import Settings
from telemetry import sources
from telemetry.errors import FactoryFloorError
from telemetry.replay.scenarios import SCENARIOS

# command -> module in app.commands with ``run(settings) -> int`` (imported when run)
COMMANDS = {
    "import": "import_",
    "ingest": "ingest",
    "scenarios": "scenarios",
    "replay": "replay",
    "serve": "serve",
    "demo": "demo",
    "summary": "summary",
    "jobs": "jobs",
    "exclude": "exclude",
}

Container = argparse.ArgumentParser | argparse._ArgumentGroup | argparse._MutuallyExclusiveGroup


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be 0 or more")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} must be a whole number, 1 or more")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def _base_port(text: str) -> int:
    return 0 if text == "0" else _port(text)


MAX_NODES = 16_384  # 131,072 GPUs: twice the largest fleet issue #16 asks to measure


def _node_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of nodes") from None
    if not 1 <= n <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"{n} nodes: give 1 to {MAX_NODES:,}")
    return n


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer seed") from None
    if value < 0:
        raise argparse.ArgumentTypeError("seed must be >= 0")
    return value


def _start(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date-time") from None


def _duration(text: str) -> float:
    from telemetry.ingest.since import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _retention(text: str) -> float:
    """``--raw-retention``: a duration, or 0 (raw rows leave once their rollups close: the
    setup where a TSDB holds the per-GPU series, docs/scaling.md)."""
    from telemetry.ingest.since import parse_duration

    try:
        return 0.0 if text.strip() == "0" else parse_duration(text, allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or 0") from None


def _scenario(text: str) -> str:
    if text not in SCENARIOS:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {text!r}; choose one of {', '.join(sorted(SCENARIOS))}"
        )
    return text


def _opt(p: Container, flag: str, name: str, **kw: Any) -> None:
    """``flag`` for setting ``name``: its help and default from ``Settings`` unless given."""
    if kw.get("action") not in ("store_true",):
        kw.setdefault("metavar", flag.lstrip("-").replace("-", "_").upper())
    kw.setdefault("default", st.default(name))
    kw.setdefault("help", st.help_text(name, kw["default"]))
    p.add_argument(flag, dest=name, **kw)


def _flag(p: Container, flag: str, name: str, **kw: Any) -> None:
    _opt(p, flag, name, action="store_true", **kw)


def _source_options(command: str, p: Container) -> None:
    """The registered sources' options on ``command`` (``telemetry.sources``)."""
    added: set[str] = set()
    for spec, opt in sources.options(command):
        dest = sources.dest(spec, opt, command)
        if dest in added:  # a flag several sources share is one option
            continue
        added.add(dest)
        if opt.flag.startswith("-"):
            kw = dict(opt.kwargs)
            if "choices" not in kw and kw.get("action") not in ("store_true", "store_false"):
                kw.setdefault("metavar", opt.key.upper())  # not the namespaced dest
            p.add_argument(opt.flag, dest=dest, **kw)
        else:  # a positional's dest is its name; the metavar is what the usage shows
            p.add_argument(dest, **{"metavar": opt.flag.upper(), **opt.kwargs})


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="factoryfloor", description="Operations dashboard for GPU training clusters.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("scenarios", help="list the replay engine's scenarios")
    _flag(s, "--json", "json")

    r = sub.add_parser("replay", help="replay a simulated cluster into a store")
    _scenario_args(r)
    optional = " (created if missing); optional with --serve-exporters"
    _opt(r, "--store", "store", help=st.help_text("store") + optional)
    mode = r.add_mutually_exclusive_group()
    _flag(mode, "--backfill", "backfill")
    _opt(r, "--raw-retention", "raw_retention", type=_retention, metavar="DURATION")
    _opt(mode, "--speed", "speed", type=_positive_float)
    _flag(r, "--no-progress", "no_progress")
    x = r.add_argument_group("simulated dcgm-exporter endpoints")
    _flag(x, "--serve-exporters", "serve_exporters")
    _opt(x, "--exporter-base-port", "exporter_base_port", type=_base_port, metavar="PORT")
    _opt(x, "--targets-file", "exporter_targets_file", metavar="PATH")

    v = sub.add_parser("serve", help="serve the dashboard over a store (this process owns it)")
    _opt(v, "--store", "store", required=True)
    _dashboard_args(v)
    also = "also replay SCENARIO live into the store from this process"
    _opt(v, "--replay", "scenario", type=_scenario, metavar="SCENARIO", help=also)
    _live_args(v, prefill_h=st.default("prefill_hours"))
    w = v.add_argument_group("ingest (this server owns the store and writes to it)")
    _flag(w, "--accept-ingest", "accept_ingest")
    _source_options("serve", w)
    _opt(w, "--token-file", "token_file", metavar="FILE")
    _opt(w, "--operator-token-file", "operator_token_file", metavar="FILE")
    _flag(w, "--ingest-into-replay", "ingest_into_replay")
    _opt(w, "--raw-retention", "raw_retention", type=_retention, metavar="DURATION")
    _opt(w, "--rw-interval", "rw_interval_s", type=_positive_float, metavar="SECONDS")
    _opt(w, "--rw-max-age", "rw_max_age_s", type=_duration, metavar="DURATION")
    _opt(w, "--rw-max-future", "rw_max_future_s", type=_duration, metavar="DURATION")
    _opt(v, "--alerts", "alerts_file", metavar="FILE")
    _opt(v, "--actions", "actions_file", metavar="FILE")
    _price_args(v)

    d = sub.add_parser("demo", help="fresh store, dev-64 replayed live, dashboard on 127.0.0.1")
    _opt(d, "--store", "store", default=st.DEMO_STORE, help="store file, replaced on start")
    _dashboard_args(d)
    d.add_argument("--scenario", type=_scenario, default=st.DEMO_SCENARIO)
    _live_args(d, prefill_h=st.DEMO_PREFILL_H)

    m = sub.add_parser("summary", help="reliability summary of every run in a store")
    m.add_argument("--store", required=True)
    _flag(m, "--json", "json", help="print JSON")
    _opt(m, "--jobs-days", "jobs_days", type=_positive_float, metavar="N")
    _opt(m, "--actions", "actions_file", metavar="FILE")
    _price_args(m)

    x = sub.add_parser("exclude", help="repeat-offender nodes as a Slurm hostlist for sbatch "
                       "--exclude=")  # fmt: skip
    _opt(x, "--store", "store", required=True)
    _opt(x, "--days", "history_days", type=_positive_float, metavar="N")
    _opt(x, "--min", "min_culprit", type=_positive_int, metavar="N")
    _opt(x, "--actions", "actions_file", metavar="FILE")
    _flag(x, "--json", "json", help="print JSON: the hostlist and each node's reason")

    j = sub.add_parser("jobs", help="one day's jobs with their GPU efficiency, as CSV")
    _opt(j, "--store", "store", required=True)
    _opt(j, "--day", "day", required=True, metavar="YYYY-MM-DD")
    _opt(j, "--csv", "csv", metavar="FILE")

    g = sub.add_parser("ingest", help="scrape dcgm-exporter targets into a store")
    _source_options("ingest", g)
    dest = g.add_mutually_exclusive_group(required=True)
    _opt(dest, "--store", "store", help="DuckDB store this process writes (headless collection)")
    _opt(dest, "--server", "server", metavar="URL")
    _opt(g, "--spool", "spool", metavar="DIR")
    _opt(g, "--spool-max-mb", "spool_max_mb", type=_positive_float)
    _opt(g, "--token-file", "token_file", metavar="FILE")
    _opt(g, "--interval", "interval_s", type=_positive_float)
    _opt(g, "--timeout", "timeout_s", type=_positive_float)
    _flag(g, "--once", "once")
    _opt(g, "--raw-retention", "raw_retention", type=_retention, metavar="DURATION")

    i = sub.add_parser("import", help="import training metrics or run events from log files")
    _opt(i, "--store", "store", required=True, help="DuckDB store (created if missing)")
    _source_options("import", i)
    return p


def _scenario_args(r: argparse.ArgumentParser) -> None:
    """A scenario and its overrides (``replay``)."""
    _opt(r, "--scenario", "scenario", type=_scenario, required=True)
    _opt(r, "--seed", "seed", type=_seed)
    _opt(r, "--interval", "sample_interval_s", type=_positive_float)
    _opt(r, "--start", "start", type=_start)
    _opt(r, "--days", "days", type=_positive_float)
    _opt(r, "--nodes", "nodes", type=_node_count)
    _opt(r, "--nvme-interval-s", "nvme_interval_s", type=_positive_float)
    _opt(r, "--pfs-every", "pfs_every", type=int)
    _opt(r, "--object-every", "object_every", type=int)


def _live_args(p: argparse.ArgumentParser, prefill_h: float) -> None:
    """Seed, speed and prefill of a replay that a serving process runs live."""
    _opt(p, "--seed", "seed", type=_seed, help=f"replay seed (default {st.default('seed')})")
    speed = f"replay speed, simulated seconds per wall second (default {st.LIVE_SPEED:g})"
    _opt(p, "--speed", "speed", type=_positive_float, default=st.LIVE_SPEED, help=speed)
    _opt(p, "--prefill-hours", "prefill_hours", type=_non_negative_float, default=prefill_h)


def _price_args(v: argparse.ArgumentParser) -> None:
    g = v.add_argument_group("money (every figure says which prices it used)")
    _opt(g, "--gpu-hour-price", "gpu_hour_price", type=_non_negative_float, metavar="USD")
    _opt(g, "--kwh-price", "kwh_price", type=_non_negative_float, metavar="USD")
    _opt(g, "--run-price", "run_price", action="append", metavar="RUN=USD[/USD]", default=None)


def _dashboard_args(v: argparse.ArgumentParser) -> None:
    _opt(v, "--host", "host")
    _opt(v, "--port", "port", type=_port)
    _flag(v, "--allow-remote", "allow_remote")
    _opt(v, "--allowed-host", "allowed_hosts", action="append", metavar="NAME", default=None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run: Callable[[Settings], int] = import_module(f"app.commands.{COMMANDS[args.command]}").run
        return run(Settings.from_args(args))
    except FactoryFloorError as exc:
        return err(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
