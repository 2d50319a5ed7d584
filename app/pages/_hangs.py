"""The Failures page's hang cards: each hang a run's flight-recorder dumps showed, told as an
SRE asks it at 3 a.m.: which collective, which rank never arrived, on which host, what it was
doing, and where the others waited. Every name is rendered as text."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import dcc, html

SHOWN_FRAMES = 6


def section() -> html.Div:
    return html.Div(id="fail-hangs")


def _frames(frames: Any) -> list[str]:
    """User code first (the frames outside torch), then PyTorch's own."""
    fs = [str(f) for f in (frames if frames is not None else [])]
    own = [f for f in fs if "/torch/" not in f]
    return (own + [f for f in fs if f not in own])[:SHOWN_FRAMES]


def _frame_list(title: str, frames: Any) -> list[Any]:
    fs = _frames(frames)
    if not fs:
        return []
    items = [html.Li(html.Code(f, className="text-break")) for f in fs]
    return [html.Div(title, className="small fw-semibold mt-2"),
            html.Ul(items, className="small mb-1")]  # fmt: skip


def _ranks(row: dict[str, Any]) -> str:
    missing = list(row.get("missing_ranks") if row.get("missing_ranks") is not None else [])
    if not missing:
        return f"{row.get('stuck_ranks') or 0:,} of {row.get('ranks') or 0:,} ranks stuck in it"
    shown = ", ".join(str(r) for r in missing[:20])
    more = f" and {len(missing) - 20:,} more" if len(missing) > 20 else ""
    return f"never called by rank(s) {shown}{more} of {row.get('ranks') or 0:,}"


def card(row: dict[str, Any], href: str | None = None) -> dbc.Card:
    """The hang as a card; ``href``: its incident view, linked from the card."""
    op = row.get("op") or "collective"
    culprit, host = row.get("culprit_rank"), row.get("culprit_host")
    who = "no single rank (every rank stuck alike)"
    if culprit is not None and culprit == culprit:  # not NaN
        who = f"rank {int(culprit)}" + (f" on {host}" if host else " (host not known)")
    when = row.get("ts")
    head = [
        html.Span("Hang", className="badge text-bg-danger me-2"),
        html.Span(f"{op} #{row.get('seq_id')}", className="fw-semibold me-2"),
        html.Span(f"process group {row.get('pg_desc') or row.get('process_group')}",
                  className="text-body-secondary small"),  # fmt: skip
    ]
    since = ""
    if when is not None and when == when:  # NaT is not equal to itself
        since = f"; the others waited in it since {when:%Y-%m-%d %H:%M:%S} UTC"
    shape = (
        f"Sizes {row.get('input_sizes') or '–'} · dtypes {row.get('dtypes') or '–'}"
        f" · from {row.get('source') or '–'}"
    )
    body = [
        html.Div(head),
        html.Div(f"Culprit: {who}", className="mt-1 fw-semibold hang-culprit"),
        html.Div(_ranks(row) + since, className="small"),
        html.Div(row.get("story") or "", className="small text-body-secondary"),
        *_frame_list("The culprit's last collective was called from", row.get("culprit_frames")),
        *_frame_list("The others wait in", row.get("waiting_frames")),
        html.Div(shape, className="small text-body-secondary"),
        *([dcc.Link("Open as an incident", href=href, className="small hang-incident")]
          if href else []),  # fmt: skip
    ]
    return dbc.Card(dbc.CardBody(body), class_name="mb-2 border-danger")
