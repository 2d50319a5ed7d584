"""Incidents: one interruption told whole, as an SRE reads it during an incident and pastes it
into the postmortem. ``/incident?at=<start>#run=...`` opens one (the Failures table, the
Overview's markers and alerts link here); without ``at``, the run's interruptions to pick from.
"""

from __future__ import annotations

from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, callback, dcc, html

from app.data import incident as data
from app.data.view import run_of, template
from app.figures import incident as fig
from app.pages import _hangs, _rawlog
from app.pages._interruptions import evidence_item, incident_href
from app.ui import graph_config, guarded, view_inputs

dash.register_page(__name__, path="/incident", name="Incidents", order=5)

MAX_AT = 40  # an ISO time; anything longer in the URL is not one


def layout(at: Any = None, log: Any = None, **_query: str) -> html.Div:
    return html.Div(
        [
            dcc.Store(id="inc-at", data=at if isinstance(at, str) and len(at) <= MAX_AT else None),
            html.Div(id="inc-body"),
            _rawlog.dialog(log),  # outside the body: the live refresh redraws the body only
        ]
    )


def _fact(label: str, value: Any, id_: str) -> dbc.Col:
    return dbc.Col(
        dbc.Card(
            dbc.CardBody(
                [
                    html.Div(label, className="text-body-secondary small"),
                    html.Div(value, className="fw-semibold", id=id_),
                ]
            ),
            class_name="h-100",
        ),
        md=6,
        xl=3,
    )


def _story(
    inc: dict[str, Any], theme: str | None, hang: dict[str, Any] | None = None, at: str = ""
) -> html.Div:
    """The interruption told whole; ``hang``: opened as the hang that stopped it (its title);
    ``at``: the page's own ``at``, which each evidence line's "raw log" link keeps."""
    conf = inc.get("confidence")
    badge = [
        dbc.Badge(inc.get("source_shown") or "", color="secondary", class_name="me-1"),
        *(
            []
            if conf is None
            else [dbc.Badge(f"confidence {float(conf) * 100:.0f} %", color="info")]
        ),
        *([dbc.Badge("planned", color="warning", class_name="ms-1")] if inc.get("planned") else []),
    ]
    facts = dbc.Row(
        [
            _fact("Cause", f"{inc['component']} ({inc['category']})", "inc-cause"),
            _fact("Where", fig.where(inc), "inc-where"),
            _fact("Restored from", fig.restored(inc), "inc-restored"),
            _fact("Lost", fig.lost(inc), "inc-lost"),
        ],
        class_name="g-2 mb-2",
    )
    todo = _action(inc)
    ident = html.Div(
        [html.Span("GPU for the replacement ticket: ", className="fw-semibold"),
         *[_part(k, v, i > 0) for i, (k, v) in enumerate(fig.identity(inc))]],
        id="inc-gpu-id",
        className="small mb-2",
    )  # fmt: skip
    times = html.Div(
        f"{fig.stop_label(inc)} {fig.when(inc['ts'])} UTC · failed {fig.failed(inc)} · job noticed "
        f"{fig.noticed(inc)} · " + fig.outcome(inc),
        className="small text-body-secondary mb-2",
        id="inc-times",
    )
    links = _links(inc["links"], "The node's GPUs around it")
    copy = _copy(fig.markdown(inc))
    hung = inc.get("hangs") or []
    hang_cards = (
        [html.H6("The hang its ranks were stuck in (flight recorder)"),
         html.Div([_hangs.card(h) for h in hung], id="inc-hangs")]
        if hung else []
    )  # fmt: skip
    evidence = inc.get("evidence") or []
    listed = (
        html.Ul([evidence_item(e, whole=True, raw=_raw(e, i, at, inc))
                 for i, e in enumerate(evidence)], className="list-unstyled mb-0")
        if evidence
        else html.Div("No evidence lines: this interruption was posted or simulated.")
    )
    return html.Div(
        [
            html.H5(
                _hang_title(hang) if hang is not None
                else [f"{fig.when(inc['ts'])} UTC · {inc['component']} ", *badge],
                id="inc-title",
                className="mb-1",
            ),
            html.Div(inc.get("description") or "", className="mb-2", id="inc-description"),
            times,
            facts,
            ident,
            todo,
            links,
            dcc.Graph(
                id="inc-timeline",
                figure=fig.timeline(inc, template(theme)).to_dict(),
                config=graph_config("incident"),
            ),
            copy,
            *hang_cards,
            html.H6(f"Evidence ({len(evidence)} lines)"),
            html.Div(listed, id="inc-evidence"),
        ]
    )


def _raw(e: dict[str, Any], i: int, at: str, inc: dict[str, Any]) -> Any:
    """The "raw log" link of evidence line ``i``: for a line read from a log file only."""
    if not data.names_a_line(e.get("origin")):
        return None
    return _rawlog.link(at or data.incident_at(inc["ts"]), i, inc["links"]["run"])


def _part(label: str, value: str, sep: bool) -> html.Span:
    """One part of the GPU's identity (``inc-gpu-uuid`` ...), "–" and why when unknown."""
    return html.Span([" · " if sep else "", html.Span(f"{label} ", className="text-body-secondary"),
                      html.Span(value, className="font-monospace",
                                id=f"inc-gpu-{label.split()[0].lower()}")])  # fmt: skip


_ACTION_COLOUR = {"drain": "danger", "page": "danger", "investigate": "warning",
                  "restart": "info"}  # fmt: skip


def _action(inc: dict[str, Any]) -> html.Div:
    """What to do about it, and whether its node failed before (a repeat offender)."""
    parts: list[Any] = []
    if inc.get("action"):
        parts += [html.Strong(f"What to do: {inc['action_text']}", id="inc-action"),
                  html.Span(f" ({inc['action_reason']})", id="inc-action-reason")]  # fmt: skip
    seen = inc.get("offender")
    if seen:
        parts.append(dbc.Badge(fig.offender_text(seen), color="danger", class_name="ms-2",
                               id="inc-offender"))  # fmt: skip
    colour = _ACTION_COLOUR.get(str(inc.get("action")), "secondary")
    return dbc.Alert(parts, color=colour, class_name="py-2 mb-2 small") if parts else html.Div()


def _copy(text: str) -> html.Div:
    """The incident's Markdown, with a button that copies it for the postmortem whether the
    "Markdown" section is open or not, and says whether it did (``assets/38-copy.js``)."""
    return html.Div(
        [
            html.Button(
                "Copy as Markdown",
                id="inc-copy",
                className="btn btn-sm btn-outline-secondary",
                title="Copy this incident as Markdown (for the postmortem)",
                **{"data-copy-target": "inc-md", "data-copy-status": "inc-copy-status"},
            ),
            html.Span("", id="inc-copy-status", className="small ms-2", role="status"),
            html.Details(
                [html.Summary("Markdown", className="small"), html.Pre(text, id="inc-md")],
                className="mt-1",
            ),
        ],
        className="mb-3",
    )


def _links(links: dict[str, str], what: str) -> html.Div:
    return html.Div(
        [
            dcc.Link(what, href="/gpus" + links["gpus"], id="inc-link-gpus", className="me-3"),
            dcc.Link("The loss curve around it", href="/training" + links["training"],
                     id="inc-link-training", className="me-3"),  # fmt: skip
            dcc.Link("All of the run's interruptions", href="/failures" + links["run"],
                     id="inc-link-failures"),  # fmt: skip
        ],
        className="mb-2 small",
    )


def _hang_title(h: dict[str, Any]) -> list[Any]:
    return [f"{fig.when(h.get('ts'))} UTC · Hang in {h.get('op') or 'a collective'} "
            f"#{h.get('seq_id')} ", dbc.Badge("flight recorder", color="secondary")]  # fmt: skip


def _hang_story(h: dict[str, Any]) -> html.Div:
    """A hang the flight recorder showed, as an incident: the collective, the culprit rank and
    its host, where it last was and where the others wait; links and Markdown."""
    return html.Div(
        [
            html.H5(
                _hang_title(h),
                id="inc-title",
                className="mb-2",
            ),
            _links(h["links"], "The culprit's node around it"),
            _hangs.card(h),
            _copy(fig.hang_markdown(h)),
        ]
    )


def _pick(run: str | None, fragment: str) -> html.Div:
    df = data.incidents(run)
    if df.empty:
        return html.Div(dbc.Alert("No interruptions or hangs in this run.", color="secondary"))
    items = [
        html.Li(
            dcc.Link(
                f"{fig.when(r.ts)} UTC · {r.component} ({r.category})"
                + (f" · {r.host}" if isinstance(r.host, str) and r.host else "")
                + (" · planned" if bool(r.planned) else ""),
                href=incident_href(r.at, fragment),
            )
        )
        for r in df.itertuples()
    ]
    return html.Div(
        [
            html.H5("Interruptions and hangs of this run, newest first"),
            html.P(
                "Open one to see it whole: its spans, evidence, restore and cost; a hang's "
                "culprit rank and where each rank was.",
                className="small text-body-secondary",
            ),  # fmt: skip
            html.Ul(items, id="inc-list"),
        ]
    )


@callback(Output("inc-body", "children"), *view_inputs(), Input("inc-at", "data"))
@guarded("alert")
def _show(view: dict[str, Any] | None, _n: int | None, theme: str | None, at: Any):  # type: ignore[no-untyped-def]
    run = run_of(view)
    if (h := data.hang(run, at)) is not None:
        # the stop it caused told whole (timeline, loss, evidence), as any failure's; a stop
        # known from the dumps alone begins when the hang did, and is opened as the hang
        return (_story(h["interruption"], theme, h, at) if h.get("interruption")
                else _hang_story(h))  # fmt: skip
    inc = data.incident(run, at)
    if inc is None:
        missing = (
            [dbc.Alert(f"No interruption or hang of this run began at {at}.", color="warning")]
            if isinstance(at, str) and at
            else []
        )
        return html.Div([*missing, _pick(run, data.run_fragment(run))])
    return _story(inc, theme, at=at)
