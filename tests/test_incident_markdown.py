""""Copy as Markdown" with hostile values: a run name, host, cause, summary, evidence line and
origin, and a hang's op, process group, story, culprit host and frames that carry HTML,
Markdown and backticks. Rendered by a real Markdown renderer with raw HTML on (Python-Markdown,
as many wikis render), no tag or attribute of theirs survives, every value still reads as
written, and a backtick in a frame or a log line does not end its code early."""

from __future__ import annotations

from datetime import datetime
from html.parser import HTMLParser
from typing import Any

import markdown as markdown_lib

from app.figures import incident as fig
from app.figures.md import code, fence, text

IMG = "<img src=x onerror=alert(1)>"
FRAME = "train.py:41 step`" + IMG + "`` x"
LINE = "NVRM: ``` </code>" + IMG + " ```` end"
ALLOWED = {"h2", "h3", "ul", "li", "p", "strong", "code", "pre"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self.codes: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag == "code":
            self._in_code += 1
            self.codes.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._in_code -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_code:
            self.codes[-1] += data


def rendered(md: str) -> _Tags:
    html = markdown_lib.markdown(md, extensions=["fenced_code"])  # raw HTML passes through
    parsed = _Tags()
    parsed.feed(html)
    return parsed


def _incident() -> dict[str, Any]:
    return {
        "ts": datetime(2026, 3, 1, 9, 53, 20),
        "detected": datetime(2026, 3, 1, 9, 55),
        "resumed": None,
        "run_id": "r1",
        "run_name": IMG + " *bold* [link](javascript:alert(1)) ![i](x) `tick",
        "component": "<script>alert(1)</script>",
        "category": "GPU & <b>",
        "source": "log's \"quote\"",
        "confidence": 0.9,
        "host": "node-7<svg onload=alert(1)>",
        "gpu": 3,
        "description": "first line\n# Heading\n<iframe src=javascript:alert(1)>",
        "lost_steps": None,
        "lost_gpu_hours": None,
        "evidence": [
            {"ts": datetime(2026, 3, 1, 9, 53), "host": "n<b>1</b>", "role": "<u>cause</u>",
             "origin": "log`<b>x</b>`:12", "line": LINE},
        ],  # fmt: skip
        "hangs": [_hang()],
    }


def _hang() -> dict[str, Any]:
    return {
        "ts": datetime(2026, 3, 1, 9, 53, 40),
        "run_id": "r1",
        "run_name": IMG,
        "op": "nccl:all_reduce" + IMG,
        "seq_id": 7,
        "pg_desc": '<a href="javascript:alert(1)">pg</a>',
        "story": "rank 3 " + IMG + " **late**",
        "culprit_rank": 3,
        "culprit_host": "h<script>x</script>",
        "missing_ranks": [3],
        "ranks": 8,
        "culprit_frames": [FRAME, "`", "plain_frame"],
        "waiting_frames": ["<i>w</i>"],
        "source": IMG,
    }


def _check(md: str, values: list[str]) -> _Tags:
    got = rendered(md)
    assert {t for t, _ in got.tags} <= ALLOWED, [t for t, _ in got.tags if t not in ALLOWED]
    assert all(not attrs for t, attrs in got.tags if t != "code"), got.tags
    shown = "".join(got.text)
    for v in values:  # escaped, not dropped: the reader sees what the log said
        assert v in shown, v
    return got


def test_an_incidents_markdown_keeps_every_hostile_value_as_text() -> None:
    inc = _incident()
    md = fig.markdown(inc)
    got = _check(md, [IMG, "<script>alert(1)</script>", "GPU & <b>", "node-7<svg onload=alert(1)>",
                      "<iframe src=javascript:alert(1)>", "n<b>1</b>", "<u>cause</u>",
                      "log's \"quote\"", '<a href="javascript:alert(1)">pg</a>',
                      "h<script>x</script>"])  # fmt: skip
    assert LINE in got.codes[-1] or any(LINE in c for c in got.codes)  # the line whole
    assert "log`<b>x</b>`:12" in got.codes
    assert FRAME in got.codes and "`" in got.codes and "<i>w</i>" in got.codes
    assert "\n# Heading" not in md  # a value cannot start a line of its own


def test_a_hangs_markdown_keeps_every_hostile_value_as_text() -> None:
    md = fig.hang_markdown(_hang())
    got = _check(md, [IMG, '<a href="javascript:alert(1)">pg</a>', "rank 3 " + IMG + " **late**"])
    assert md.startswith("## 2026-03-01 09:53:40 UTC: hang in nccl:all_reduce&lt;img")
    assert FRAME in got.codes and "plain_frame" in got.codes


def test_code_fences_are_longer_than_any_backtick_run_in_the_value() -> None:
    assert code("a``b") == "```a``b```"
    assert code("`x") == "`` `x ``"
    assert fence("a ```` b", "  ") == ["  `````", "  a ```` b", "  `````"]
    assert fence("x") == ["```", "x", "```"]
    assert text("a_b _c_ *d* [e](f) <g> & \"h\" 'i'\nj") == (
        "a_b \\_c\\_ \\*d\\* \\[e\\](f) &lt;g&gt; &amp; &quot;h&quot; &#39;i&#39; j"
    )
