"""Values written into Markdown that a wiki may render with raw HTML on: a run name, a host, a
log line or a stack frame comes from a cluster's users and logs, so none of it may become
markup. ``text`` escapes HTML (``& < > " '`` as entities: no tag, no attribute survives) and
the characters that start inline Markdown (emphasis, code, links, images, tables,
strikethrough), and folds line breaks (a value cannot start a heading or a list of its own);
``code`` and ``fence`` put a value in an inline code span or a fenced block whose backtick run
is longer than any in the value (CommonMark's rule), so a backtick cannot close it early.
Inside code, CommonMark keeps every character literal, HTML included."""

from __future__ import annotations

import re
from typing import Any

_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
_INLINE = set("\\`*_[]|~")  # backslash-escaped (CommonMark: any ASCII punctuation may be)
_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")
_TICKS = re.compile(r"`+")


def text(value: Any) -> str:
    """``value`` as Markdown text that renders as exactly these characters on one line."""
    s = _BREAKS.sub(" ", str(value))
    out = []
    for i, ch in enumerate(s):
        if ch == "_" and 0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum():
            out.append(ch)  # inside a word (all_reduce): never emphasis in CommonMark
        else:
            out.append(_HTML.get(ch) or ("\\" + ch if ch in _INLINE else ch))
    return "".join(out)


def _fence_len(value: str, least: int) -> int:
    return max([least, *(len(run) + 1 for run in _TICKS.findall(value))])


def code(value: Any) -> str:
    """``value`` as an inline code span on one line."""
    s = _BREAKS.sub(" ", str(value))
    ticks = "`" * _fence_len(s, 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def fence(value: Any, indent: str = "") -> list[str]:
    """``value`` as a fenced code block, each line indented by ``indent`` (inside a list)."""
    s = str(value)
    ticks = "`" * _fence_len(s, 3)
    body = [indent + line for line in _BREAKS.split(s)] or [indent]
    return [indent + ticks, *body, indent + ticks]
