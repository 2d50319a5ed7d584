"""``factoryfloor summary``: the reliability figures of every run in a store."""

from __future__ import annotations

import json
import os

from app.settings import Settings
from telemetry import actions
from telemetry.cost import money
from telemetry.errors import FactoryFloorError


def run(s: Settings) -> int:
    from telemetry.metrics.summary import store_summary
    from telemetry.store import open_store

    assert s.store is not None  # the parser requires it
    if not os.path.exists(s.store):
        raise FactoryFloorError(f"store {s.store} does not exist")
    prices = s.prices()
    actions.configure(s.actions_file)  # what to do about each interruption (issue 58)
    with open_store(s.store, read_only=True) as store:
        summary = store_summary(store, prices, jobs_days=s.jobs_days)
    if s.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    for r in summary["runs"]:
        i = r["interruptions"]
        print(
            f"{r['run_id']} ({_state(r)}): {_n(r['gpus'], '{:,}')} GPUs, "
            f"{_n(r['wall_hours'], '{:.1f} h')}, "
            f"ETTR {_n(r['ettr'], '{:.1%}')}, MTBF {_n(r['mtbf_hours'], '{:.1f} h')}, "
            f"MFU {_n(r['mfu'], '{:.1%}')}, {i['unexpected']} unexpected + {i['planned']} "
            f"planned interruptions ({i.get('inferred', 0)} inferred), "
            f"{_n(r['lost_gpu_hours'], '{:,.0f}')} GPU-h lost "
            f"({money(r['cost']['lost_usd'])} at {prices.for_run(r['run_id']).text()})"
        )
        g = r.get("goodput")
        if g:
            print(f"  goodput {_n(g['goodput'], '{:.1%}')} of {g['window_s'] / 3600:,.1f} h "
                  f"(ideal step {_n(g['ideal_step_s'], '{:.3f} s')}):")  # fmt: skip
            usd = g.get("usd") or {}
            kwh = (g.get("energy") or {}).get("kwh") or {}
            for k, v in g["seconds"].items():
                share = f"  {v / g['window_s']:6.1%}" if g["window_s"] else ""
                cost = f"  {money(usd[k])}" if k in usd else ""
                drawn = f"  {kwh[k]:,.0f} kWh" if k in kwh else ""
                print(f"  {k:<18} {v / 3600:9.2f} h{share}{cost}{drawn}")
            if kwh:
                print(f"  (energy by {g['energy']['basis']}: each hour's GPU energy split by "
                      "the seconds of each category in it)")
            if g.get("slow_ranks"):
                print("  " + slow_ranks_line(g["slow_ranks"]))
            for e in g.get("rank_spread") or []:
                print("  " + rank_spread_line(e))
    if summary.get("accounting"):
        print(accounting_line(summary["accounting"], summary["accounting_price"]))
    return 0


def accounting_line(days: list[dict], price: str) -> str:
    """The cluster's GPU-hours of yesterday (UTC), or of the newest day the store has."""
    from datetime import datetime, timedelta

    yesterday = (datetime.utcnow() - timedelta(days=1)).strftime("%Y-%m-%d")  # noqa: DTZ003
    d = next((d for d in days if d["day"] == yesterday), days[-1])
    when = "yesterday" if d["day"] == yesterday else "newest day"
    rep = d["reported"] or 0.0

    def part(name: str, key: str) -> str:
        share = f" ({d[key] / rep:.0%})" if rep else ""
        return f"{name} {d[key]:,.1f}{share}"

    accounts = ", ".join(f"{k} {v:,.1f}" for k, v in list(d["accounts"].items())[:3])
    return (
        f"cluster GPU-hours {when} ({d['day']} UTC): reported {rep:,.1f}; "
        + "; ".join(part(n, k) for n, k in (("allocated", "allocated"), ("idle", "idle"),
                                            ("down", "down"), ("planned down", "planned_down")))
        + (f"; by account: {accounts}" if accounts else "")
        + f"; allocated {money(d['usd']['allocated'])}, idle {money(d['usd']['idle'])} at {price}"
    )  # fmt: skip


SHOW_SLOW_RANKS = 3


def slow_ranks_line(ranks: list[dict]) -> str:
    """One line naming the slowest ranks (goodput's ``slow_ranks``, worst first)."""
    parts = []
    for e in ranks[:SHOW_SLOW_RANKS]:
        where = f" on {e['host']}" if e.get("host") else ""
        score = f"score {e['score']:.2f}, " if e.get("score") is not None else ""
        if e.get("worst") is not None and e["worst"] != e.get("score"):
            score = f"worst {e['worst']:.2f}, now {e['score']:.2f}, "
        note = f"; {e['gpu_note']}" if e.get("gpu_note") else ""
        parts.append(f"rank {e['rank']}{where} ({score}{e['pattern']}, flagged in "
                     f"{e['windows']} report window(s){note})")  # fmt: skip
    more = f" and {len(ranks) - SHOW_SLOW_RANKS} more" if len(ranks) > SHOW_SLOW_RANKS else ""
    return "slow ranks: " + "; ".join(parts) + more


def rank_spread_line(e: dict) -> str:
    """One line of a logged score spread (goodput's ``rank_spread``: min/median/max over the
    ranks, no rank named)."""
    from telemetry.queries.slow_ranks import SLOW_SCORE

    now = " / ".join(f"{s} {e[s]:.2f}" for s in ("min", "median", "max") if e[s] is not None)
    low = f"; lowest min {e['worst_min']:.2f}" if e["worst_min"] is not None else ""
    return (f"{e['metric']} over the ranks (logged, no rank named): {now or 'none'} in the "
            f"newest of {e['windows']} report(s){low}, below {SLOW_SCORE} in "
            f"{e['slow_windows']}")  # fmt: skip


def _state(r: dict) -> str:
    """ "finished at step N", "stopped", "running" (at its data's end)."""
    if r["state"] == "finished" and r["steps"] is not None:
        return f"finished at step {r['steps']:,}"
    return r["state"]


def _n(value: object, fmt: str) -> str:
    """A figure, or "–" where the store does not know it (never 0, never "None")."""
    return "–" if value is None else fmt.format(value)
