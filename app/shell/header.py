"""What follows the view above every page: the pages' links (which carry the view), the
simulation banner, the data's span and its age.

One callback, not four: Dash's renderer runs at most 12 callbacks at once, and a page's own
slowest ones queued behind these (the GPUs page's drill-down started after the first answers,
not with the others). A refresh tick alone changes only the times.
"""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, ctx, no_update

from app.data.view import (
    ago,
    clean_view,
    data_age,
    extent,
    fragment,
    run_extent,
    run_ids,
    run_label,
    run_undated,
)
from app.shell.layout import banner, nav_id


def _nav(pages: list[dict[str, Any]], view: Any) -> list[str]:
    view = clean_view(view)
    query = fragment(view) if view.get("run") else ""
    return [p["relative_path"] + query for p in pages]


def _sim_banner(view: Any) -> Any:
    if view is None:  # the view is not set yet: no banner rather than the wrong one
        return []
    return banner(clean_view(view).get("run"))


NO_DATA = "No data stored yet."


def _updated(view: Any) -> str:
    """The selected run's own time (the store's without a run), and the newest data."""
    ext = extent()
    run = clean_view(view).get("run")
    if run_undated(run):  # not the store's time, which is other runs' (#57: no made-up time)
        return "Data of a time unknown: no line of this run's logs gives a wall-clock time."
    if ext is None:  # runs whose logs give no wall-clock time are data, of a time unknown
        return "Data of a time unknown: no stored line dates it." if run_ids() else NO_DATA
    own = run_extent(run) or ext
    return (
        f"Data {own.start:%Y-%m-%d %H:%M} – {own.end:%Y-%m-%d %H:%M:%S} UTC · "
        f"last updated {ext.end:%H:%M:%S} UTC"
    )


# a run whose data says it ended (``summary``'s state): a finished import is not a live feed gone
# quiet ("Live, but nothing new has arrived since" beside "Run finished", #57)
_ENDED = {"finished": "the run finished", "stopped": "the run stopped: nothing resumed it",
          "unknown": "the run's log ended, how unknown"}


def _age(view: Any, live: Any) -> tuple[str, str]:
    """How old the shown run's newest data is; with Live on and nothing new, says so."""
    run = clean_view(view).get("run")
    age = data_age(run)
    if age is None:
        return "", ""
    whose = f"{run_label(run)}: " if run else ""
    if age["end"] is None:  # a run no line dates (``_updated`` says so): its state alone
        text = run_label(run)
    else:
        text = f"{whose}data to {age['end']:%Y-%m-%d %H:%M} UTC, {ago(age['age_s'])} ago"
    if age["state"] in _ENDED:  # nothing new is due from a run that ended: no warning
        return text + f" · {_ENDED[age['state']]}", ""
    if live is True and age["stale"]:
        # Bootstrap's emphasis colour (#664d03 on white, #ffda6a on dark): "text-warning" is the
        # same yellow-orange on both themes, unreadable on white (issue 57).
        return text + " · Live, but nothing new has arrived since", "text-warning-emphasis"
    return text, ""


def register(app: dash.Dash) -> None:
    pages = list(dash.page_registry.values())

    @app.callback(
        *[Output(nav_id(p), "href") for p in pages],
        Output("sim-banner-box", "children"),
        Output("last-updated", "children"),
        Output("data-age", "children"),
        Output("data-age", "className"),
        Input("view", "data"),
        Input("refresh", "n_intervals"),
        Input("live-switch", "value"),
    )
    def _header(view: Any, _n: int | None, live: Any) -> tuple[Any, ...]:
        tick = set(ctx.triggered_prop_ids) == {"refresh.n_intervals"}
        nav = [no_update] * len(pages) if tick else _nav(pages, view)
        banner_out = no_update if tick else _sim_banner(view)
        return *nav, banner_out, _updated(view), *_age(view, live)
