"""The ``factoryfloor`` command line: scenarios, replay, serve, demo, summary.

The composition root: it wires telemetry (store, replay) to the dashboard, so it lives on the
app side of the one-way door (telemetry never imports app).

Every failure a user can cause (wrong arguments, a locked or missing store, an unknown scenario,
a port in use) ends in one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import json
import os
import socket
import sys
import threading
from datetime import datetime, timedelta
from typing import NoReturn

from telemetry.errors import FactoryFloorError
from telemetry.replay.scenarios import SCENARIOS, get_scenario

DEFAULT_DEMO_STORE = "factoryfloor-demo.duckdb"
_STATE = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
DEFAULT_SPOOL = os.path.join(_STATE, "factoryfloor", "spool")


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
    if text.strip() == "0":
        return 0.0
    return _positive_float(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


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


def _scenario(text: str) -> str:
    if text not in SCENARIOS:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {text!r}; choose one of {', '.join(sorted(SCENARIOS))}"
        )
    return text


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="factoryfloor", description="Operations dashboard for GPU training clusters.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("scenarios", help="list the replay engine's scenarios")
    s.add_argument("--json", action="store_true", help="machine-readable output")

    r = sub.add_parser("replay", help="replay a simulated cluster into a store")
    _replay_args(r, required=True)
    r.add_argument(
        "--store", help="DuckDB store file (created if missing); optional with --serve-exporters"
    )
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--backfill", action="store_true", help="as fast as possible (default)")
    mode.add_argument(
        "--speed", type=_positive_float, help="live: simulated seconds per wall second"
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    _exporter_args(r)

    v = sub.add_parser("serve", help="serve the dashboard over a store (this process owns it)")
    v.add_argument("--store", required=True, help="DuckDB store file")
    _serve_args(v)
    v.add_argument(
        "--replay",
        type=_scenario,
        metavar="SCENARIO",
        help="also replay SCENARIO live into the store from this process",
    )
    _live_args(v, prefill_h=0.0)
    w = v.add_argument_group("ingest (this server owns the store and writes to it)")
    w.add_argument(
        "--accept-ingest",
        action="store_true",
        help="accept forwarded scrape rounds, training metrics and run events on /api/v1/",
    )
    w.add_argument(
        "--scrape-config",
        metavar="FILE",
        help="scrape the dcgm-exporter targets in FILE from this process (see README)",
    )
    _token_arg(w)
    w.add_argument(
        "--ingest-into-replay",
        action="store_true",
        help="load tests: let scrapes of a replay's own simulated exporters land in its store "
        "(it stays marked simulated)",
    )

    d = sub.add_parser("demo", help="fresh store, dev-64 replayed live, dashboard on 127.0.0.1")
    d.add_argument("--store", default=DEFAULT_DEMO_STORE, help="store file, replaced on start")
    _serve_args(d)
    d.add_argument("--scenario", type=_scenario, default="dev-64")
    _live_args(d, prefill_h=20.0)

    m = sub.add_parser("summary", help="reliability summary of every run in a store")
    m.add_argument("--store", required=True)
    m.add_argument("--json", action="store_true", help="print JSON")

    g = sub.add_parser("ingest", help="scrape dcgm-exporter targets into a store")
    g.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL",
        help="host:9400 or http://host:9400/metrics (repeatable)",
    )
    g.add_argument(
        "--targets-file",
        metavar="FILE",
        help="Prometheus file_sd JSON/YAML, re-read when it changes",
    )
    dest = g.add_mutually_exclusive_group(required=True)
    dest.add_argument("--store", help="DuckDB store this process writes (headless collection)")
    dest.add_argument(
        "--server",
        metavar="URL",
        help="forward rounds to `factoryfloor serve --accept-ingest` at URL, spooling on disk",
    )
    g.add_argument(
        "--spool",
        default=DEFAULT_SPOOL,
        metavar="DIR",
        help=f"--server: on-disk spool for undelivered rounds (default {DEFAULT_SPOOL})",
    )
    g.add_argument(
        "--spool-max-mb",
        type=_positive_float,
        default=2048.0,
        help="--server: spool size bound; when full new rounds are dropped with a warning",
    )
    _token_arg(g)
    g.add_argument(
        "--interval", type=_positive_float, default=15.0, help="seconds between rounds (default 15)"
    )
    g.add_argument(
        "--timeout",
        type=_positive_float,
        default=5.0,
        help="per-target timeout, seconds (default 5)",
    )
    g.add_argument("--once", action="store_true", help="one round, then exit")
    _import_parser(sub)
    return p


def _replay_args(r: argparse.ArgumentParser, required: bool) -> None:
    r.add_argument("--scenario", type=_scenario, required=required, help="see `scenarios`")
    r.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    r.add_argument("--interval", type=_positive_float, help="per-GPU sample interval, seconds")
    r.add_argument("--start", type=_start, help="simulated start time (ISO, UTC)")
    r.add_argument("--days", type=_positive_float, help="override the scenario's duration")
    r.add_argument("--nvme-interval-s", type=_positive_float, help="NVMe checkpoint interval")
    r.add_argument("--pfs-every", type=int, help="copy every Nth NVMe checkpoint to the PFS")
    r.add_argument("--object-every", type=int, help="copy every Nth PFS checkpoint to objects")


def _base_port(text: str) -> int:
    return 0 if text == "0" else _port(text)


def _exporter_args(r: argparse.ArgumentParser) -> None:
    x = r.add_argument_group("simulated dcgm-exporter endpoints")
    x.add_argument(
        "--serve-exporters",
        action="store_true",
        help="serve every simulated node as a dcgm-exporter on 127.0.0.1 (/metrics, /health); "
        "streams live (--speed defaults to 1, --interval to min(scenario's, 30 s)), "
        "--store optional",
    )
    x.add_argument(
        "--exporter-base-port",
        type=_base_port,
        metavar="PORT",
        help="node i listens on PORT+i (default 9400; 0: any free ports)",
    )
    x.add_argument(
        "--targets-file", metavar="PATH", help="write the endpoints as Prometheus file_sd JSON"
    )


def _live_args(p: argparse.ArgumentParser, prefill_h: float) -> None:
    """Seed, speed and prefill of a replay that a serving process runs live."""
    p.add_argument("--seed", type=_seed, default=0, help="replay seed (default 0)")
    p.add_argument(
        "--speed",
        type=_positive_float,
        default=1.0,
        help="replay speed, simulated seconds per wall second (default 1)",
    )
    p.add_argument(
        "--prefill-hours",
        type=_non_negative_float,
        default=prefill_h,
        help=f"simulated hours backfilled before going live (default {prefill_h:g})",
    )


def _serve_args(v: argparse.ArgumentParser) -> None:
    v.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    v.add_argument("--port", type=_port, default=8050, help="TCP port (default 8050)")
    v.add_argument(
        "--allow-remote",
        action="store_true",
        help="required to bind an address other than loopback",
    )


def _token_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="access token (file with one line; or set FACTORYFLOOR_TOKEN): serve requires it "
        "of the dashboard and the ingest API, ingest sends it; never on the command line, "
        "where `ps` shows it",
    )


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as fh:
                tok = fh.read().strip()
        except OSError as exc:
            raise FactoryFloorError(f"--token-file {args.token_file}: {exc.strerror}") from None
    else:
        tok = os.environ.get("FACTORYFLOOR_TOKEN", "").strip()
    if tok and (len(tok) < 16 or not tok.isprintable()):
        raise FactoryFloorError("the token must be at least 16 printable characters")
    return tok or None


def _err(msg: str, code: int = 1) -> int:
    print(f"factoryfloor: error: {msg}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except FactoryFloorError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": s.name,
                        "summary": s.summary,
                        "description": s.description,
                        "gpus": s.gpus,
                        "days": s.days,
                    }
                    for s in SCENARIOS.values()
                ],
                indent=2,
            )
        )
        return 0
    for s in SCENARIOS.values():
        print(f"{s.name:<14} {s.summary}\n{'':<14} {s.description}\n")
    return 0


def _scenario_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    sc = get_scenario(args.scenario)
    for name in ("pfs_every", "object_every"):
        val = getattr(args, name, None)
        if val is not None and val < 1:
            raise FactoryFloorError(f"--{name.replace('_', '-')} must be >= 1")
    return sc.with_overrides(
        days=getattr(args, "days", None),
        start=getattr(args, "start", None),
        nvme_interval_s=getattr(args, "nvme_interval_s", None),
        pfs_every=getattr(args, "pfs_every", None),
        object_every=getattr(args, "object_every", None),
    )


def _progress_bar(total: float, enabled: bool):  # type: ignore[no-untyped-def]
    if not enabled:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=round(total / 3600.0, 2), unit="sim-h", dynamic_ncols=True, file=sys.stderr)

    def update(done: float, _total: float, rows: int) -> None:
        bar.n = round(done / 3600.0, 2)
        bar.set_postfix_str(f"{rows:,} samples", refresh=False)
        bar.refresh()

    return bar, update


def cmd_replay(args: argparse.Namespace) -> int:
    from telemetry.replay.runner import replay
    from telemetry.store import open_store

    if args.serve_exporters:
        return _replay_exporters(args)
    if args.store is None:
        return _err("the following arguments are required: --store", 2)
    if args.exporter_base_port is not None or args.targets_file is not None:
        return _err("--exporter-base-port and --targets-file need --serve-exporters", 2)
    sc = _scenario_from(args)
    if args.speed is not None and args.start is None:
        sc = sc.with_overrides(start=datetime.utcnow().replace(second=0, microsecond=0))
    with open_store(args.store) as store:
        bar, update = _progress_bar(sc.duration_s, not args.no_progress and sys.stderr.isatty())
        try:
            res = replay(
                store, sc, args.seed, interval_s=args.interval, speed=args.speed, progress=update
            )
        except ValueError as exc:
            raise FactoryFloorError(str(exc)) from None
        finally:
            if bar is not None:
                bar.close()
    print(
        f"replayed {res.run_id}: {res.sample_rows:,} GPU samples, "
        f"{res.sim_seconds / 3600:.1f} simulated hours in {res.wall_seconds:.1f} s "
        f"({res.rows_per_s:,.0f} rows/s) into {args.store}"
    )
    return 0


def _replay_exporters(args: argparse.Namespace) -> int:
    """`replay --serve-exporters`: the simulated nodes as live dcgm-exporter endpoints, and the
    same replay into --store (paced alike, on a thread) when one is given."""
    from telemetry.replay.exporters import (
        ExporterFarm,
        ExporterSimulation,
        exporter_interval,
        serve_exporters,
    )

    if args.backfill:
        return _err("--serve-exporters streams live; it cannot --backfill", 2)
    sc = _scenario_from(args)
    if args.start is None:
        sc = sc.with_overrides(start=datetime.utcnow().replace(second=0, microsecond=0))
    base = 9400 if args.exporter_base_port is None else args.exporter_base_port
    if base and base + sc.nodes + sc.spare_nodes - 1 > 65535:
        return _err(
            f"--exporter-base-port {base}: {sc.nodes + sc.spare_nodes} nodes need ports up to "
            f"{base + sc.nodes + sc.spare_nodes - 1} (max 65535)",
            2,
        )
    speed, interval = args.speed or 1.0, args.interval or exporter_interval(sc)
    farm = ExporterFarm(ExporterSimulation(sc, args.seed, interval), base)
    stop, workers, errors = threading.Event(), [], []

    def ready(f: ExporterFarm) -> None:  # every node listens: start the store's replay too
        if args.store is not None:
            workers.append(
                _store_replay_thread(args.store, sc, args.seed, interval, speed, stop, errors)
            )
        where = f", targets in {args.targets_file}" if args.targets_file else ""
        print(
            f"serving {len(f.ports)} dcgm-exporter endpoints on 127.0.0.1:{f.ports[0]}.."
            f"{f.ports[-1]} ({sc.name}, seed {args.seed}, live at {speed:g}x, one sample "
            f"every {interval:g} simulated s){where}",
            file=sys.stderr,
            flush=True,
        )

    try:
        serve_exporters(farm, speed, args.targets_file, ready)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    print(f"served {farm.requests:,} requests; simulated {farm.sim.t / 3600:.2f} h")
    return 1 if errors else 0


def _store_replay_thread(path, sc, seed, interval, speed, stop, errors):  # type: ignore[no-untyped-def]
    from telemetry.replay.runner import replay
    from telemetry.store import open_store

    store = open_store(path)  # on the caller's thread: a locked store ends the command at once

    def run() -> None:
        try:
            replay(store, sc, seed, interval_s=interval, speed=speed, stop=stop)
        except Exception as exc:  # the exporters keep serving; the exit status says it failed
            errors.append(exc)
            print(f"factoryfloor: error: replay into {path} stopped: {exc}", file=sys.stderr)
        finally:
            store.close()

    worker = threading.Thread(target=run, name="replay-store", daemon=True)
    worker.start()
    return worker


def _is_loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def _check_bind(host: str, allow_remote: bool) -> None:
    try:
        loopback = _is_loopback(host)
    except ValueError:
        raise FactoryFloorError(f"--host {host!r} is not an IP address") from None
    if not loopback and not allow_remote:
        raise FactoryFloorError(
            f"refusing to listen on {host}: the dashboard binds to 127.0.0.1 unless you pass "
            "--allow-remote"
        )


def _check_port_free(host: str, port: int) -> None:
    """Fail before any store is opened (or, for ``demo``, reset) when the port is taken.
    Werkzeug would otherwise print its own two lines and exit after the store was touched."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug binds
        try:
            s.bind((host, port))
        except OSError as exc:
            hint = " (another server is on that port; pass --port)"
            raise FactoryFloorError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                + (hint if exc.errno == errno.EADDRINUSE else "")
            ) from None


def _serve(
    store_path: str,
    host: str,
    port: int,
    replay_sc=None,  # type: ignore[no-untyped-def]
    seed: int = 0,
    speed: float = 1.0,
    prefill_h: float = 0.0,
    accept_ingest: bool = False,
    scrape=None,  # type: ignore[no-untyped-def]
    token: str | None = None,
    into_replay: bool = False,
) -> int:
    from app import guard
    from app.main import create_app, run_server
    from app.memory import keep_rss_flat
    from telemetry.collect.http_api import IngestService, make_blueprint
    from telemetry.replay.runner import replay
    from telemetry.store import open_store

    # Without a writer in this process the store is opened read-only, so other read-only
    # processes (a second dashboard, `summary`) can share it; DuckDB forbids that next to a writer.
    writes = replay_sc is not None or accept_ingest or scrape is not None
    store = open_store(store_path, read_only=not writes)
    service = IngestService(store, into_replay=into_replay) if writes else None
    stop = threading.Event()
    keep_rss_flat(stop)  # before any worker or request thread allocates
    workers = []
    if replay_sc is not None:
        sc = replay_sc.with_overrides(
            start=(datetime.utcnow() - timedelta(hours=prefill_h)).replace(second=0, microsecond=0)
        )
        print(
            f"replaying {sc.name} (seed {seed}): {prefill_h:g} simulated hours backfilled, "
            f"then live at {speed:g}x",
            file=sys.stderr,
        )

        def run() -> None:
            try:
                replay(store, sc, seed, speed=speed, prefill_s=prefill_h * 3600.0, stop=stop)
            except Exception as exc:  # the server keeps serving what is stored
                print(f"factoryfloor: replay stopped: {exc}", file=sys.stderr)

        workers.append(threading.Thread(target=run, name="replay", daemon=True))
    if scrape is not None:
        workers.append(_scrape_thread(service, *scrape, stop))
    app = create_app(store)
    guard.install(app.server, token)
    app.server.register_blueprint(make_blueprint(service, token, accept=accept_ingest))
    if token is None and not _is_loopback(host):
        _log(
            f"WARNING: listening on {host} without a token: anyone who can reach port {port} "
            "sees the dashboard (and may post to the ingest API). Pass --token-file."
        )
    for w in workers:
        w.start()
    print(f"Factory Floor dashboard on http://{host}:{port}/ (store {store_path})", file=sys.stderr)
    try:
        run_server(app, host, port)
    except OSError as exc:
        raise FactoryFloorError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=10)
        store.close()
    return 0


def _log(line: str) -> None:
    print(f"{datetime.utcnow():%H:%M:%S} {line}", file=sys.stderr, flush=True)


def _round_line(rep) -> str:  # type: ignore[no-untyped-def]
    return (
        f"{rep.up}/{rep.targets} targets up, {rep.samples:,} GPU samples, "
        f"{rep.xid_events} XID events, {rep.rejected_lines} rejected lines"
    )


def _scrape_thread(service, cfg, source, stop):  # type: ignore[no-untyped-def]
    from telemetry.collect.daemon import run_rounds

    def handle(ts: datetime, fetches: list) -> str:  # type: ignore[type-arg]
        r = service.write_round(ts, fetches, cfg.interval_s)
        return f"scrape: {r['up']}/{r['targets']} targets up, {r['samples']:,} GPU samples"

    def run() -> None:
        try:
            run_rounds(source, handle, cfg.interval_s, cfg.timeout_s, stop, _log)
        except Exception as exc:  # the server keeps serving what is stored
            _log(f"factoryfloor: scrape loop stopped: {exc}")

    return threading.Thread(target=run, name="scrape", daemon=True)


def _scrape_config(path: str):  # type: ignore[no-untyped-def]
    from telemetry.collect.daemon import TargetSource, load_scrape_config

    try:
        cfg = load_scrape_config(path)
        return cfg, TargetSource(cfg.targets, cfg.files, _log)
    except OSError as exc:
        raise FactoryFloorError(f"--scrape-config {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise FactoryFloorError(f"--scrape-config: {exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    _check_bind(args.host, args.allow_remote)
    _check_port_free(args.host, args.port)
    writes = args.replay or args.accept_ingest or args.scrape_config
    if not writes and not os.path.exists(args.store):
        raise FactoryFloorError(
            f"store {args.store} does not exist; create it with `factoryfloor replay` "
            "or pass --replay SCENARIO"
        )
    token = _token(args)
    if args.accept_ingest and token is None and not _is_loopback(args.host):
        raise FactoryFloorError(
            f"refusing to accept ingest on {args.host} without a token: anyone who can reach "
            "the port could write into the store. Pass --token-file (or set FACTORYFLOOR_TOKEN)."
        )
    scrape = _scrape_config(args.scrape_config) if args.scrape_config else None
    sc = get_scenario(args.replay) if args.replay else None
    return _serve(
        args.store,
        args.host,
        args.port,
        sc,
        args.seed,
        args.speed,
        args.prefill_hours,
        accept_ingest=args.accept_ingest,
        scrape=scrape,
        token=token,
        into_replay=args.ingest_into_replay,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from telemetry.store import open_store

    _check_bind(args.host, args.allow_remote)
    _check_port_free(args.host, args.port)
    # The demo starts from an empty store, but it only deletes a Factory Floor store nobody
    # else has open: opening it first refuses a store another process owns (a running demo
    # would go on writing into an unlinked file) and a file that is not ours.
    if os.path.exists(args.store):
        open_store(args.store).close()
    for suffix in ("", ".wal"):
        if os.path.exists(args.store + suffix):
            os.remove(args.store + suffix)
    return _serve(
        args.store,
        args.host,
        args.port,
        get_scenario(args.scenario),
        args.seed,
        args.speed,
        args.prefill_hours,
    )


def cmd_summary(args: argparse.Namespace) -> int:
    from telemetry.store import open_store
    from telemetry.summary import store_summary

    if not os.path.exists(args.store):
        raise FactoryFloorError(f"store {args.store} does not exist")
    with open_store(args.store, read_only=True) as store:
        summary = store_summary(store)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    for r in summary["runs"]:
        i = r["interruptions"]
        gpus = "?" if r["gpus"] is None else f"{r['gpus']:,}"  # an ingested run may not say
        print(
            f"{r['run_id']}: {gpus} GPUs, {r['wall_hours']:.1f} h, ETTR {r['ettr']}, "
            f"MTBF {r['mtbf_hours']} h, MFU {r['mfu']}, {i['unexpected']} unexpected + "
            f"{i['planned']} planned interruptions, {r['lost_gpu_hours']:,.0f} GPU-h lost"
        )
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from telemetry.collect.daemon import TargetSource, run_rounds

    if not args.target and not args.targets_file:
        raise FactoryFloorError("give at least one --target or a --targets-file")
    if args.timeout >= args.interval and not args.once:
        raise FactoryFloorError("--timeout must be shorter than --interval")
    try:
        source = TargetSource(args.target, [args.targets_file] if args.targets_file else [], _log)
    except OSError as exc:
        raise FactoryFloorError(f"{exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise FactoryFloorError(str(exc)) from None
    stop = threading.Event()
    if args.server:
        return _ingest_forward(args, source, stop)
    from telemetry.collect.sink import StoreSink
    from telemetry.store import open_store

    with open_store(args.store) as store:
        try:
            sink = StoreSink(store, args.interval)
        except ValueError as exc:
            raise FactoryFloorError(str(exc)) from None
        last = []

        def handle(ts: datetime, fetches: list) -> str:  # type: ignore[type-arg]
            rep = sink.write(ts, fetches)
            last[:] = [rep]
            return f"round {ts.isoformat()} stored: {_round_line(rep)}"

        run_rounds(source, handle, args.interval, args.timeout, stop, _log, once=args.once)
        return 0 if not args.once or (last and last[0].up) else 1


def _ingest_forward(args, source, stop) -> int:  # type: ignore[no-untyped-def]
    from urllib.parse import urlsplit

    from telemetry.collect.daemon import run_rounds
    from telemetry.collect.forward import Forwarder
    from telemetry.collect.spool import Spool

    parts = urlsplit(args.server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FactoryFloorError(f"--server {args.server!r} is not an http(s) URL")
    spool = Spool(args.spool, int(args.spool_max_mb * 2**20))
    timeout = max(60.0, 4 * args.interval)  # a busy server is slow, not gone: no early resend
    fwd = Forwarder(args.server, spool, _token(args), timeout_s=timeout, log=_log)
    backlog = len(spool.pending())
    if backlog:
        _log(f"{backlog} spooled rounds from an earlier run in {spool.dir}; delivering them first")

    def handle(ts: datetime, fetches: list) -> str:  # type: ignore[type-arg]
        kept = fwd.submit(ts, fetches, args.interval)
        up = sum(f.error is None for f in fetches)
        line = f"round {ts.isoformat()} {'spooled' if kept else 'DROPPED'}: {up}/{len(fetches)} "
        line += f"targets up; {fwd.delivered} rounds delivered"
        if fwd.failing_since is not None:
            line += f", {len(spool.pending())} waiting (server: {fwd.last_error})"
        return line

    try:
        if args.once:
            run_rounds(source, handle, args.interval, args.timeout, stop, _log, once=True)
            if fwd.drain():
                if fwd.rejected:
                    _log(f"the server refused the round; it is kept in {spool.rejected_dir}")
                    return 4
                _log(f"delivered to {args.server}")
                return 0
            _log(
                f"server {args.server} did not take the round ({fwd.last_error}); "
                f"{len(spool.pending())} rounds stay in {spool.dir} for the next run"
            )
            return 3
        fwd.start()
        run_rounds(source, handle, args.interval, args.timeout, stop, _log)
        return 0
    finally:
        fwd.stop()
        spool.close()


_IMPORT_KINDS = ("train_metrics", "interruptions", "checkpoints", "runs")  # records.KINDS
_LOG_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
IMPORT_CHUNK = 20_000  # records per transaction; fixed, so a re-import finds the same batch ids
_SHOW_REJECTIONS = 5


def _import_parser(sub) -> None:  # type: ignore[no-untyped-def]
    i = sub.add_parser("import", help="import training metrics or run events from log files")
    i.add_argument("--store", required=True, help="DuckDB store (created if missing)")
    i.add_argument("--run", help="run id for records that name none (required for TensorBoard)")
    i.add_argument(
        "--kind",
        choices=_IMPORT_KINDS,
        default="train_metrics",
        help="what the files hold (default train_metrics)",
    )
    i.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help=".jsonl/.json, .csv, a TensorBoard events.out.tfevents.* file or a directory of them",
    )


def _log_format(path: str, args: argparse.Namespace) -> str:
    name = os.path.basename(os.path.normpath(path))
    if not os.path.exists(path):
        raise FactoryFloorError(f"{path}: no such file or directory")
    if os.path.isdir(path) or name.startswith("events.out.tfevents."):
        if args.kind != "train_metrics":
            raise FactoryFloorError(f"{path}: TensorBoard files hold train_metrics only")
        if not args.run:
            raise FactoryFloorError(f"{path}: TensorBoard files do not name their run; add --run")
        return "tensorboard"
    ext = os.path.splitext(name)[1].lower()
    if ext not in _LOG_FORMATS:
        raise FactoryFloorError(
            f"{path}: unknown format {ext or '(no extension)'}; expected .jsonl, .json, .csv, or "
            "a TensorBoard events.out.tfevents.* file or directory"
        )
    return _LOG_FORMATS[ext]


def _read_log(path: str, fmt: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from telemetry.collect import importers

    if fmt == "tensorboard":
        return importers.read_tensorboard(path, args.run)
    log = importers.read_jsonl(path) if fmt == "jsonl" else importers.read_csv(path)
    for rec in log.records:
        if args.run and isinstance(rec, dict) and rec.get("run") is None:
            rec["run"] = args.run
    return log


def _log_digest(path: str, args: argparse.Namespace) -> str:
    """Content hash of a log (and what it is imported as): the batch ids of its chunks."""
    import hashlib

    from telemetry.collect.importers import event_files

    h = hashlib.sha256(f"{args.kind}\0{args.run}\0".encode())
    for f in event_files(path) if os.path.isdir(path) else [path]:
        with open(f, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()[:32]


def _import_log(store, log, args: argparse.Namespace) -> bool:  # type: ignore[no-untyped-def]
    """Store one parsed log in chunks and print what happened; False if nothing was usable."""
    from telemetry.collect.records import store_records

    digest = _log_digest(log.path, args)
    stored, duplicates = 0, 0
    rejected = [f"{b.origin}: {b.reason}" for b in log.bad_lines]
    ignored = dict(log.ignored_tags)
    for start in range(0, len(log.records), IMPORT_CHUNK):
        rep = store_records(
            store,
            args.kind,
            log.records[start : start + IMPORT_CHUNK],
            batch_id=f"import:{digest}:{start}",
            source="import",
        )
        stored, duplicates = stored + rep.stored, duplicates + rep.duplicate
        rejected += [f"{log.origins[start + r.index]}: {r.reason}" for r in rep.rejected]
        for key, n in rep.ignored_fields.items():
            ignored[key] = ignored.get(key, 0) + n
    again = " (already imported: nothing written)" if duplicates else ""
    print(f"{log.path}: {stored:,} {args.kind} records stored, {len(rejected):,} rejected{again}")
    for line in rejected[:_SHOW_REJECTIONS]:
        print(f"  rejected {line}")
    if len(rejected) > _SHOW_REJECTIONS:
        print(f"  ... and {len(rejected) - _SHOW_REJECTIONS:,} more rejected")
    if ignored:
        print("  ignored: " + ", ".join(f"{k} ({n:,})" for k, n in sorted(ignored.items())))
    return bool(stored or duplicates)


def cmd_import(args: argparse.Namespace) -> int:
    from telemetry.store import open_store

    # Every file is checked and parsed before the store is opened: a typo writes nothing.
    logs = [_read_log(f, _log_format(f, args), args) for f in args.files]
    with open_store(args.store) as store:
        empty = [log.path for log in logs if not _import_log(store, log, args)]
    if empty:
        return _err(f"nothing stored from {', '.join(empty)}: no valid records")
    return 0


_COMMANDS = {
    "import": cmd_import,
    "ingest": cmd_ingest,
    "scenarios": cmd_scenarios,
    "replay": cmd_replay,
    "serve": cmd_serve,
    "demo": cmd_demo,
    "summary": cmd_summary,
}

if __name__ == "__main__":
    raise SystemExit(main())
