"""What the serving process hands the pages once: the store and the services around it.

``create_app`` binds one frozen ``Services`` here (``bind``); every adapter of ``app.data`` reads
it through ``store()`` and the accessors below. Nothing sets a part of it later: ``serve`` builds
the whole (prices, alert delivery, the Prometheus history, the operator token) before the app.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from telemetry import label_api
from telemetry.cost import PriceBook, Prices, price_book
from telemetry.store import Store


@dataclass(frozen=True)
class Services:
    """The store the dashboard shows and what serving it needs besides.

    ``prices``: what money figures use (``serve --gpu-hour-price`` ...; defaults otherwise).
    ``alerts``: the serving process's alert delivery (an ``AlertLoop``; None: no ``--alerts``).
    ``history``: where per-GPU series older than the raw window are read (a ``PromHistory``
    with ``serve --prometheus``; None otherwise). ``operator_token``: the token that allows
    corrections and silences from the pages (``--operator-token-file``; None: read-only)."""

    store: Store
    prices: PriceBook = field(default_factory=lambda: price_book(None, None, None))
    alerts: Any = None
    history: Any = None
    operator_token: str | None = None


_services: Services | None = None
_on_bind: list[Callable[[], None]] = []


def on_bind(hook: Callable[[], None]) -> None:
    """Run ``hook`` whenever another store is bound (caches of the old store's data)."""
    _on_bind.append(hook)


def bind(services: Services | Store) -> None:
    """Serve ``services`` (a store alone: with the default prices and no other service)."""
    global _services
    new = services if isinstance(services, Services) else Services(services)
    if new.operator_token == "":
        new = Services(new.store, new.prices, new.alerts, new.history, None)
    old, _services = _services, new
    if old is None or new.store is not old.store:  # after the swap: computed from here on
        for hook in _on_bind:  # is of the new store
            hook()


def services() -> Services:
    if _services is None:
        raise RuntimeError("the dashboard is not bound to a store (use app.main.create_app)")
    return _services


def store() -> Store:
    return services().store


P = ParamSpec("P")
R = TypeVar("R")


def bound(query: Callable[Concatenate[Store, P], R]) -> Callable[P, R]:
    """``query`` (a telemetry function whose first argument is the store) with the bound
    store given: how a page's data module offers a query it adds nothing to, instead of a
    wrapper per query that only passes the call on. Where the page needs work done first
    (cleaning what a browser sent, choosing an option, reshaping), its module does it."""

    @functools.wraps(query)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return query(store(), *args, **kwargs)

    return call


def version() -> int:
    """The bound store's data version: it changes with every write (keys of cached replies)."""
    return store().version


def prices(run_id: Any) -> Prices:
    """A run's prices: its own (``--run-price``), else the server's, else the defaults."""
    return services().prices.for_run(run_id if isinstance(run_id, str) else None)


def corrections_allowed() -> bool:
    return services().operator_token is not None and not store().read_only


def alert_rules() -> Any:
    """The alerts file's ``[rules]`` (``alerting.Rules``) when ``serve`` has ``--alerts``, so
    the Overview raises what the receivers get; None otherwise."""
    loop = services().alerts
    return getattr(getattr(getattr(loop, "dispatcher", None), "config", None), "rules", None)


def refused(token: Any) -> tuple[int, str] | None:
    """The 403 an operator write from a page gets (no operator token configured, or a wrong
    one given), as the HTTP API words it; None when it may go ahead."""
    expected = services().operator_token
    if expected is None:
        return 403, "403 Forbidden: " + label_api.FORBIDDEN_OFF
    if not label_api.operator_ok(token if isinstance(token, str) else None, expected):
        return 403, "403 Forbidden: " + label_api.FORBIDDEN_TOKEN
    return None


def together(*reads: Callable[[], Any]) -> list[Any]:
    """The results of ``reads`` (functions of no argument), run at once, in order; the first
    error is raised. Reads a view needs that do not depend on each other: each query has its
    own DuckDB cursor and DuckDB works outside the GIL, so the first viewer after a write
    waits for the slowest of them, not their sum. Each read but the first gets a thread of
    its own, not a shared pool: under fifty users a pool's queue makes reads answered from the
    result cache wait behind other views' cold ones (benchmarks/reliability.py's load, one run
    each: callback p95 1.6 s with a three-worker pool, 1.0 s with threads)."""
    results: list[Any] = [None] * len(reads)
    errors: list[BaseException | None] = [None] * len(reads)

    def run(i: int) -> None:
        try:
            results[i] = reads[i]()
        except BaseException as exc:  # raised in the caller's thread below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(1, len(reads))]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results
