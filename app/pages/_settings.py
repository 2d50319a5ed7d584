"""The Overview's "Run settings": parallelism, batch sizes and sequence length as the run's
logs state them (Megatron-LM's arguments block, TorchTitan's start line, the Hugging Face
Trainer's "Running training" block), verbatim, each with the ``file:line`` that said it. A
setting stated with two values (changed on a restart) shows both; none stated says so."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import Output, callback, html

from app.data import overview as data
from app.data.view import run_of
from app.ui import guarded, view_inputs

NONE_STATED = ("The run's logs state none of its settings: Megatron-LM's arguments block, "
               "TorchTitan's \"Training starts\" line or the Hugging Face Trainer's "
               "\"Running training\" block say them.")  # fmt: skip


def section() -> dbc.Card:
    return dbc.Card(
        dbc.CardBody([html.H6("Run settings (as its logs state them)", className="mb-2"),
                      html.Div(id="ov-settings")]),  # fmt: skip
        class_name="mt-2",
    )


@callback(Output("ov-settings", "children"), *view_inputs(themed=False))
@guarded("alert")
def _settings(view: dict[str, Any] | None, _n: int | None):  # type: ignore[no-untyped-def]
    run = run_of(view)
    if run is None:
        return html.Div("No run selected.", className="small text-body-secondary")
    df = data.run_settings(run)
    if df.empty:
        return html.Div(NONE_STATED, className="small text-body-secondary", id="ov-settings-none")
    rows = [
        html.Tr([html.Td(data.SETTING_NAMES.get(r.name, r.name)),
                 html.Td(r.value, className="font-monospace fw-semibold"),
                 html.Td(r.origin + (f" (and {int(r.lines) - 1} more lines)" if r.lines > 1
                                     else ""), className="small text-body-secondary")],
                **{"data-setting": r.name})
        for r in df.itertuples()
    ]  # fmt: skip
    head = html.Thead(html.Tr([html.Th("Setting"), html.Th("Value"), html.Th("Stated at")]))
    return dbc.Table([head, html.Tbody(rows)], size="sm", class_name="mb-0", id="ov-settings-table")
