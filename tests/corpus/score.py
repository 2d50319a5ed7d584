"""Score the product on the corpus of real failure logs (README.md beside this file).

Each excerpt is imported blind, as a user would: ``factoryfloor import --store S --run R FILE``
into a fresh DuckDB store, through the CLI's own entry point (``app.cli.main``) in this
process, so each import costs its work, not an interpreter start as well. Then ``summary
--json`` is read back, as a user would, and its interruptions are compared with the label.

Per excerpt: did import succeed (exit 0, no exception), was an interruption found, is its
cause (component) the label's, and the culprit: ``right`` (names the labelled rank or host and
contradicts neither), ``victim`` (names a rank or host the thread showed was not the culprit),
``unconfirmed`` (names one where the thread established none: a guess, counted against
precision as issue #56 asks), ``missed`` (names none where the thread established one) or
``unknown`` (names none, and the thread established none either: the right answer).

    from tests.corpus.score import load_labels, score_all, table
    results = score_all(load_labels())
    print(table(results))
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
import tomllib
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
LABELS = CORPUS / "labels.toml"
RUN = "corpus"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Label:
    """One excerpt and what its thread established (labels.toml)."""

    file: str  # relative to CORPUS
    url: str
    framework: str
    component: str  # the cause, in the product's vocabulary
    category: str
    culprit_rank: int | None  # None: the thread established none
    culprit_host: str | None
    why: str
    # The parts of the label ("cause", "culprit") that rest on the thread alone: no line of the
    # excerpt shows them (a cause found after the paste, an error line the paste left out).
    from_thread: frozenset[str] = frozenset()

    @property
    def path(self) -> Path:
        return CORPUS / self.file

    @property
    def has_culprit(self) -> bool:
        return self.culprit_rank is not None or self.culprit_host is not None


@dataclass(frozen=True)
class Result:
    """What the product made of one excerpt, and how that compares with its label."""

    label: Label
    exit_code: int | None  # None: the import raised
    error: str  # the traceback, or the CLI's error line; "" when it exited 0
    signals: str  # the import's account of the signals it recognised
    untimed: int  # signal lines it recognised but skipped for want of a wall-clock time
    found: bool
    component: str | None  # of the first interruption found
    rank: int | None
    host: str | None
    confidence: float | None
    extra: int  # interruptions beyond the first (each excerpt is one failure)

    @property
    def import_ok(self) -> bool:
        return self.exit_code == 0

    @property
    def crashed(self) -> bool:
        return self.exit_code is None

    @property
    def cause_right(self) -> bool:
        return self.found and self.component == self.label.component

    @property
    def cause_wrong(self) -> bool:
        """A cause named that is not the thread's; "Unknown" names none (a wrong answer is
        worse than "unknown", #56)."""
        return self.found and self.component not in (self.label.component, "Unknown")

    @property
    def culprit(self) -> str:
        """right, victim, unconfirmed, missed or unknown (module doc)."""
        lab = self.label
        named = self.rank is not None or self.host is not None
        if not named:
            return "missed" if lab.has_culprit else "unknown"
        if not lab.has_culprit:
            return "unconfirmed"
        checks = [(self.rank, lab.culprit_rank), (self.host, lab.culprit_host)]
        known = [(got, want) for got, want in checks if got is not None and want is not None]
        if any(got != want for got, want in known):
            return "victim"
        return "right" if known else "unconfirmed"


def load_labels(path: Path = LABELS) -> list[Label]:
    """Every labelled excerpt; ValueError naming the entry when one is incomplete."""
    out = []
    for i, e in enumerate(tomllib.loads(path.read_text(encoding="utf-8"))["excerpt"]):
        missing = [k for k in ("file", "url", "framework", "component", "category", "why")
                   if not e.get(k)]  # fmt: skip
        if missing or "culprit_rank" not in e or "culprit_host" not in e:
            raise ValueError(f"{path.name} entry {i + 1} ({e.get('file')}): missing {missing}")
        rank, host = e["culprit_rank"], e["culprit_host"]
        if bad := set(e.get("from_thread", ())) - {"cause", "culprit"}:
            raise ValueError(f"{path.name} entry {i + 1} ({e['file']}): from_thread {bad}")
        out.append(Label(
            e["file"], e["url"], e["framework"], e["component"], e["category"],
            None if rank == UNKNOWN else int(rank), None if host == UNKNOWN else str(host),
            e["why"], frozenset(e.get("from_thread", ())),
        ))  # fmt: skip
    return out


def _cli(argv: list[str]) -> tuple[int | None, str, str]:
    """``factoryfloor ARGV`` in this process: exit code (None when it raised), stdout, and
    stderr with the traceback appended when it raised."""
    from app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | None = main(argv)
        except SystemExit as exc:  # argparse, or a command that exits
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - a traceback is the finding, not a test crash
            code = None
            err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue()


_SIGNALS = re.compile(r"signals: ([^,]*(?:, (?!\d+ checkpoint)[^,]*)*)")
_UNTIMED = re.compile(r"(\d+) signal lines? without a wall-clock time")


def score_one(label: Label, workdir: Path) -> Result:
    """Import ``label``'s excerpt into a fresh store under ``workdir`` and compare."""
    store = workdir / "s.duckdb"
    code, out, err = _cli(["import", "--store", str(store), "--run", RUN, str(label.path)])
    m = _SIGNALS.search(out)
    signals = m.group(1) if m else ""
    untimed = sum(int(n) for n in _UNTIMED.findall(out + err))
    ints: list[dict] = []
    if code == 0 and store.exists():
        scode, sout, serr = _cli(["summary", "--store", str(store), "--json"])
        if scode != 0:
            code, err = scode, serr or f"summary exited {scode}"
        else:
            runs = [r for r in json.loads(sout)["runs"] if r.get("run_id") == RUN]
            ints = runs[0]["interruptions"].get("list", []) if runs else []
    first = ints[0] if ints else {}
    return Result(
        label, code, "" if code == 0 else (err.strip() or out.strip()), signals, untimed,
        bool(ints),
        first.get("component"), first.get("rank"), first.get("host"), first.get("confidence"),
        max(0, len(ints) - 1),
    )  # fmt: skip


def score_all(labels: Iterable[Label]) -> list[Result]:
    """Every excerpt scored, each in its own temporary store."""
    results = []
    for label in labels:
        with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
            results.append(score_one(label, Path(tmp)))
    return results


@dataclass(frozen=True)
class Score:
    """The figures of a group of excerpts (a framework, or all)."""

    n: int
    import_ok: int
    crashed: int
    found: int
    cause_right: int
    cause_wrong: int  # a cause named that the thread contradicts (Result.cause_wrong)
    right: int
    victim: int
    unconfirmed: int
    missed: int
    with_culprit: int  # excerpts whose thread established a culprit

    @property
    def named(self) -> int:
        return self.right + self.victim + self.unconfirmed

    @property
    def precision(self) -> float | None:
        """Named and right over named (#56); None when nothing was named."""
        return self.right / self.named if self.named else None

    @property
    def recall(self) -> float | None:
        return self.right / self.with_culprit if self.with_culprit else None


def summarise(results: list[Result]) -> Score:
    def count(outcome: str) -> int:
        return sum(r.culprit == outcome for r in results)

    return Score(
        len(results), sum(r.import_ok for r in results), sum(r.crashed for r in results),
        sum(r.found for r in results), sum(r.cause_right for r in results),
        sum(r.cause_wrong for r in results), count("right"),
        count("victim"), count("unconfirmed"), count("missed"),
        sum(r.label.has_culprit for r in results),
    )  # fmt: skip


@dataclass(frozen=True)
class Shown:
    """The cause and culprit figures over the labels the excerpt itself shows (a label's
    ``from_thread`` parts left out): what any reader of the lines alone could get right."""

    causes: int  # excerpts whose cause the lines show
    cause_right: int
    culprits: int  # culprits the lines place
    right: int


def shown(results: list[Result]) -> Shown:
    causes = [r for r in results if "cause" not in r.label.from_thread]
    culprits = [r for r in results if r.label.has_culprit and "culprit" not in r.label.from_thread]
    return Shown(len(causes), sum(r.cause_right for r in causes),
                 len(culprits), sum(r.culprit == "right" for r in culprits))  # fmt: skip


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def table(results: list[Result]) -> str:
    """The score per framework and overall, as a Markdown table."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.label.framework, []).append(r)
    head = ("| framework | excerpts | import ok | found | cause right (wrong) | culprit named "
            "(right / victim / unconfirmed) | precision | recall (right / thread's) |")  # fmt: skip
    rows = [head, "|" + "---|" * 8]
    for name, rs in [*sorted(groups.items()), ("**all**", results)]:
        s = summarise(rs)
        rows.append(
            f"| {name} | {s.n} | {s.import_ok} | {s.found} | {s.cause_right} ({s.cause_wrong}) | "
            f"{s.named} ({s.right} / {s.victim} / {s.unconfirmed}) | {_pct(s.precision)} | "
            f"{_pct(s.recall)} ({s.right} / {s.with_culprit}) |"
        )
    return "\n".join(rows)


def findings(results: list[Result]) -> str:
    """One line per excerpt where an interruption was found with a cause that is not the
    thread's, or a culprit the thread does not support, or where import raised."""
    lines = []
    for r in results:
        why = []
        if r.crashed:
            why.append("CRASH " + (r.error.splitlines() or ["?"])[-1])
        if r.found and not r.cause_right:
            said = "WRONG: " if r.cause_wrong else ""
            why.append(f"{said}cause {r.component!r}, thread says {r.label.component!r}")
        if r.culprit in ("victim", "unconfirmed"):
            why.append(f"named {r.culprit}: rank {r.rank} host {r.host} (conf {r.confidence})")
        if why:
            lines.append(f"- {r.label.file}: {'; '.join(why)} [signals: {r.signals or 'none'}]")
    return "\n".join(lines)


def miss_reason(r: Result) -> str | None:
    """Why no interruption came out of an excerpt (None when one did)."""
    if r.found:
        return None
    refused = "" if r.import_ok else f"import exit {r.exit_code}, "
    if r.untimed:
        return f"{refused}signal lines recognised but skipped without a wall-clock time"
    if refused:
        return f"{refused}nothing recognised"
    if r.signals and r.signals != "none":
        return f"signals ({r.signals}) but no progress stream, so no interruption"
    return "nothing recognised"


def misses(results: list[Result]) -> str:
    """The excerpts with no interruption, grouped by why."""
    groups: dict[str, list[str]] = {}
    for r in results:
        reason = miss_reason(r)
        if reason:
            groups.setdefault(reason, []).append(r.label.file)
    return "\n".join(f"- {k} ({len(v)}): {', '.join(v)}" for k, v in sorted(groups.items()))
