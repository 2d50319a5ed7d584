"""Every ``factoryfloor ...`` line the README and the guides in ``docs/`` show parses with the
real command-line parser, as written: in code blocks (continuation lines joined) and in inline
code in the prose. A user copies them; ``serve --store s.duckdb --prometheus URL
--raw-retention 7d`` was once described in the README and refused by ``serve``."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from app.cli import build_parser
from tests.conftest import ROOT

SUBCOMMANDS = ("serve", "ingest", "import", "replay", "summary", "demo", "scenarios", "jobs",
               "exclude")
# What a refusal of a fragment in the prose means: an option or value that does not exist
# (a fragment may leave out a required option the sentence around it names).
WRONG = ("unrecognized arguments", "invalid choice", " value: ")


def _blocks(text: str) -> list[str]:
    out = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split(" #", 1)[0].strip()
            m = re.search(r"(?:^|[\s/$])factoryfloor\s+(\S.*)$", line)
            if m and not line.startswith("#"):
                out.append(m[1])
    return out


def _inline(text: str) -> list[str]:
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    names = "|".join(SUBCOMMANDS)
    return [
        m[1]
        for m in re.finditer(rf"`(?:factoryfloor\s+)?((?:{names})\s+--[^`]*)`", outside)
    ]


def _argv(command: str) -> list[str]:
    for cut in (" && ", " ; ", " > ", " 2>", " | "):
        command = command.split(cut, 1)[0]
    command = command.replace("...", "x").replace("…", "x")
    command = re.sub(r"\[([^\[\]]*)\]", r" \1 ", command)  # [--port 8050]: an optional part
    return shlex.split(command)


def _refusal(argv: list[str]) -> str | None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1]
    return None


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)  # the README and its guides


@pytest.mark.parametrize("command", _blocks(README))
def test_every_command_block_line_parses(command: str) -> None:
    assert _refusal(_argv(command)) is None, f"factoryfloor {command}"


@pytest.mark.parametrize("command", _inline(README))
def test_every_inline_command_uses_options_that_exist(command: str) -> None:
    why = _refusal(_argv(command))
    assert why is None or not any(w in why for w in WRONG), f"factoryfloor {command}: {why}"


def test_the_readme_shows_commands() -> None:
    own = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in own and "make test" in own and len(_blocks(own)) >= 5
    assert len(_blocks(README)) >= 20 and len(_inline(README)) >= 5
    assert any("--prometheus" in c and c.startswith("serve") for c in _inline(README))
