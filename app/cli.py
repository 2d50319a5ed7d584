"""The ``factoryfloor`` command line: scenarios, replay, serve, demo, summary.

The composition root: it wires telemetry (store, replay) to the dashboard, so it lives on the
app side of the one-way door (telemetry never imports app).

Every failure a user can cause (wrong arguments, a locked or missing store, an unknown scenario,
a port in use) ends in one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
import threading
import time
from datetime import datetime, timedelta
from typing import NoReturn

from telemetry.errors import FactoryFloorError
from telemetry.replay.scenarios import SCENARIOS, get_scenario

DEFAULT_DEMO_STORE = "factoryfloor-demo.duckdb"


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
    g.add_argument("--store", required=True, help="DuckDB store this process writes")
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


def _check_bind(host: str, allow_remote: bool) -> None:
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise FactoryFloorError(f"--host {host!r} is not an IP address") from None
    if not loopback and not allow_remote:
        raise FactoryFloorError(
            f"refusing to listen on {host}: the dashboard binds to 127.0.0.1 unless you pass "
            "--allow-remote"
        )


def _serve(
    store_path: str,
    host: str,
    port: int,
    replay_sc=None,
    seed: int = 0,  # type: ignore[no-untyped-def]
    speed: float = 1.0,
    prefill_h: float = 0.0,
) -> int:
    from app.main import create_app, run_server
    from telemetry.replay.runner import replay
    from telemetry.store import open_store

    # Without a writer in this process the store is opened read-only, so other read-only
    # processes (a second dashboard, `summary`) can share it; DuckDB forbids that next to a writer.
    store = open_store(store_path, read_only=replay_sc is None)
    stop = threading.Event()
    worker = None
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

        worker = threading.Thread(target=run, name="replay", daemon=True)
        worker.start()
    app = create_app(store)
    print(f"Factory Floor dashboard on http://{host}:{port}/ (store {store_path})", file=sys.stderr)
    try:
        run_server(app, host, port)
    except OSError as exc:
        raise FactoryFloorError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    finally:
        stop.set()
        if worker is not None:
            worker.join(timeout=10)
        store.close()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    _check_bind(args.host, args.allow_remote)
    if args.replay is None and not os.path.exists(args.store):
        raise FactoryFloorError(
            f"store {args.store} does not exist; create it with `factoryfloor replay` "
            "or pass --replay SCENARIO"
        )
    sc = get_scenario(args.replay) if args.replay else None
    return _serve(args.store, args.host, args.port, sc, args.seed, args.speed, args.prefill_hours)


def cmd_demo(args: argparse.Namespace) -> int:
    _check_bind(args.host, args.allow_remote)
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
        print(
            f"{r['run_id']}: {r['gpus']:,} GPUs, {r['wall_hours']:.1f} h, ETTR {r['ettr']}, "
            f"MTBF {r['mtbf_hours']} h, MFU {r['mfu']}, {i['unexpected']} unexpected + "
            f"{i['planned']} planned interruptions, {r['lost_gpu_hours']:,.0f} GPU-h lost"
        )
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from telemetry.collect.scrape import TargetsFile, normalise, scrape_round
    from telemetry.collect.sink import StoreSink
    from telemetry.store import open_store

    if not args.target and not args.targets_file:
        raise FactoryFloorError("give at least one --target or a --targets-file")
    if args.timeout >= args.interval and not args.once:
        raise FactoryFloorError("--timeout must be shorter than --interval")
    try:
        fixed = [normalise(t) for t in args.target]
        tfile = TargetsFile(args.targets_file) if args.targets_file else None
        if tfile is not None:
            tfile.targets()  # a missing or malformed file is an error now, not later
    except (OSError, ValueError) as exc:
        raise FactoryFloorError(str(exc)) from None
    from telemetry.collect.scrape import Target

    with open_store(args.store) as store:
        sink = StoreSink(store, args.interval)
        while True:
            started = time.monotonic()
            targets = [Target(u) for u in fixed]
            if tfile is not None:
                try:
                    targets += tfile.targets()
                except (OSError, ValueError) as exc:  # keep the last good list
                    print(f"factoryfloor: targets file: {exc}", file=sys.stderr)
                    targets += tfile.last_good
            report = sink.write(datetime.utcnow(), scrape_round(targets, args.timeout))
            print(
                f"{report.ts:%H:%M:%S} {report.up}/{report.targets} targets up, "
                f"{report.samples:,} GPU samples, {report.xid_events} XID events, "
                f"{report.rejected_lines} rejected lines",
                file=sys.stderr,
            )
            if args.once:
                return 0 if report.up else 1
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))


_COMMANDS = {
    "ingest": cmd_ingest,
    "scenarios": cmd_scenarios,
    "replay": cmd_replay,
    "serve": cmd_serve,
    "demo": cmd_demo,
    "summary": cmd_summary,
}

if __name__ == "__main__":
    raise SystemExit(main())
