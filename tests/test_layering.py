"""Layering rules that no single module shows, checked by reading the source.

- ``telemetry.collect`` (what real clusters send) never imports ``telemetry.replay`` (the
  simulator), directly or through any other module of ours: a collector must run, and be read,
  without the simulation. Words both need (the planned category, the tiers) live in
  ``telemetry.vocabulary``.
- The replay engine never imports ``telemetry.collect``: it writes through the same seam as the
  sources (``telemetry.ingest``), not through any of them.
- ``telemetry.ingest`` (the seam, the loop, the writer) imports no source: what every source
  shares lives in the ingest, so a new source is one package that imports it.
- The sources (each package of ``telemetry.collect``) never import each other, with no
  exception: where two are given together (the logs and the checkpoint directories of an
  ``import``), the command composes them.
- ``telemetry.store`` imports no source and no ingest: it is written to, it does not collect.
  Nor does it import ``telemetry.derive``: the derived rows are computed above it and written
  into it (the signal kinds it reads are ``telemetry.signals``, below both).
- The sources (``telemetry.collect``) never import ``telemetry.derive``: they record signals
  in the words of ``telemetry.signals``; what the signals mean is derived after the write.
- What follows a write (rollups, the Slurm refresh, job figures, hangs' hosts, interruptions)
  is triggered in one place, the steps of ``telemetry.after_write``, and only the store writer
  (``telemetry.ingest.writer``) runs them: no other module calls a step's work or the registry.
- ``telemetry.metrics`` (figures computed from stored rows when read) imports no ingest: it
  reads what was written. ``telemetry.queries`` (all the SQL) never imports a metric: metrics
  sit above the queries, so a figure has one home and the queries stay reads.
- No two rooms import each other (a room is a package of ``telemetry/`` or a module at its
  root), with no exception.
- No import circles among the modules of ``telemetry/`` and ``app/`` (an import inside a
  function counts: it runs, later, with the same result).
- No module in ``telemetry/`` or ``app/`` is over ``MAX_LINES`` lines unless its docstring says
  why, on a line ``Long module: <reason>``. A long module is usually several responsibilities
  that change for different reasons; the marker makes the exception a decision someone wrote.

How to add within these rules, one page each (a failure below names the page it breaks):
docs/howto/adding-a-source.md, docs/howto/adding-a-page.md,
docs/howto/adding-a-derived-metric.md, docs/howto/adding-an-alert-rule.md and
docs/howto/adding-a-log-format.md.

The checkers are tested on small trees of their own too, so a rule that can no longer fail
(an import form the walk misses, a marker it misreads) is caught.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 500
SOURCE_HOWTO = "docs/howto/adding-a-source.md"
METRIC_HOWTO = "docs/howto/adding-a-derived-metric.md"  # where a figure lives, so no circle
LONG_MARKER = "Long module:"
# a statement as this code writes them (upper case), not words (``"with care"``)
_SQL_RE = re.compile(r"\s*(WITH \w+ AS|SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b")
_STORE_READS = {"df", "rows", "scalar", "execute"}
_MARKER_RE = re.compile(rf"^\s*{re.escape(LONG_MARKER)}\s*(.*)$", re.M)

# Modules that a parallel branch of issue 18 is taking apart (item 2: the CLI by command).
# They may stay long until it is merged; an entry no longer over the limit fails below, so
# the list cannot outlive the split. Remove the entry when merging that branch.
PENDING_SPLIT: dict[str, str] = {}  # module -> the split that will bring it under the limit


# What only a step of ``telemetry.after_write`` may call (``after_write.run``: only the writer).
STEP_WORK = re.compile(
    r"\b(?:refresh_rollups|job_figures\.keep|slurm_store\.refresh|derive\.derive|"
    r"place_unplaced|after_write\.run)\("
)
STEP_CALLERS = {"telemetry/after_write.py": "the registry", "telemetry/ingest/writer.py": "runs it"}

# ---- the import walk ---------------------------------------------------------------------------


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``packages`` (folders of ``root``)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str], own_packages: bool = True) -> set[str]:
    """The modules of ``known`` that running module ``name`` imports: at any depth of its code
    (an import inside a function counts), relative imports resolved, and with every package
    whose ``__init__`` such an import runs. Without ``own_packages``, the packages ``name`` is
    in are left out where an import only runs their ``__init__`` (to reach a module below
    them) and reads no name from it: Python has begun running those before ``name``, so such an
    import cannot bring it round again (what the circle check needs)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    read: set[str] = set()  # the modules an import names, not only runs the packages of
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
            read |= set(targets)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]  # a name may be a module
            read |= {t for t in targets[1:] if t in known}
            if any(t not in known for t in targets[1:]):
                read.add(base)  # a name defined in the package's __init__
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known
    if not own_packages:
        found = {m for m in found if m in read or not name.startswith(m + ".")}
    found.discard(name)
    return found


def import_graph(
    root: Path, packages: tuple[str, ...], own_packages: bool = True
) -> dict[str, set[str]]:
    files = modules(root, packages)
    return {name: imports_of(name, path, set(files), own_packages) for name, path in files.items()}


def forbidden_chains(graph: dict[str, set[str]], source: str, banned: str) -> list[str]:
    """For each module in package ``source``, the shortest import chain (``a -> b -> c``) that
    reaches package ``banned``, if any."""

    def within(module: str, package: str) -> bool:
        return module == package or module.startswith(package + ".")

    chains = []
    for start in sorted(m for m in graph if within(m, source)):
        seen = {start: ""}
        queue = deque([start])
        while queue:
            current = queue.popleft()
            hits = [m for m in graph.get(current, ()) if within(m, banned)]
            if hits:  # name the module itself, not only the package its import also runs
                chain = [max(hits, key=len), current]
                while seen[chain[-1]]:
                    chain.append(seen[chain[-1]])
                chains.append(" -> ".join(reversed(chain)))
                break
            for nxt in sorted(graph.get(current, ())):
                if nxt not in seen:
                    seen[nxt] = current
                    queue.append(nxt)
    return chains


def circles(graph: dict[str, set[str]]) -> list[str]:
    """One import circle (``a -> b -> a``) for each group of modules that import each other,
    directly or through others, starting at the group's first module by name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = {stack.pop()}
            while v not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        start = min(group)
        came = {start: ""}
        queue = deque([start])
        while not came[start]:  # the shortest way back to the start
            current = queue.popleft()
            for nxt in sorted(graph[current] & group):
                if nxt == start and not came[start]:
                    came[start] = current
                elif nxt not in came:
                    came[nxt] = current
                    queue.append(nxt)
        path, at = [start], came[start]
        while at != start:
            path.append(at)
            at = came[at]
        out.append(" -> ".join([start, *reversed(path[1:]), start]))
    return sorted(out)


def between_sources(
    graph: dict[str, set[str]], sources: str, allowed: Iterable[tuple[str, str]] = ()
) -> list[str]:
    """Import chains from one package of ``sources`` (each a source) into another, but for the
    ``allowed`` (module, module) imports (with the packages such an import runs)."""
    packages = sorted({".".join(m.split(".")[: sources.count(".") + 2]) for m in graph})
    packages = [p for p in packages if p.startswith(sources + ".") and p in graph]
    ok = {(m, ".".join(n.split(".")[:i])) for m, n in allowed for i in range(1, n.count(".") + 2)}
    pruned = {m: {n for n in to if (m, n) not in ok} for m, to in graph.items()}
    return [
        chain
        for a in packages
        for b in packages
        if a != b
        for chain in forbidden_chains(pruned, a, b)
    ]


def room_pairs(graph: dict[str, set[str]], top: str) -> list[tuple[str, str]]:
    """The pairs of rooms of ``top`` (each package of it, or module at its root) that import
    each other, each pair named once, in order."""

    def room(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == top and len(parts) > 1 else None

    edges = {
        (room(a), room(b))
        for a, to in graph.items()
        for b in to
        if room(a) and room(b) and room(a) != room(b)
    }
    return sorted({(a, b) for a, b in edges if a < b and (b, a) in edges})  # type: ignore[operator]


# ---- the length rule ---------------------------------------------------------------------------


def long_reason(path: Path) -> str | None:
    """The reason after ``Long module:`` in the module's docstring, None without one (a marker
    in a comment or in a function's docstring does not count)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True) or ""
    m = _MARKER_RE.search(doc)
    reason = m[1].strip() if m else ""
    return reason if len(reason.split()) >= 3 else None  # "Long module: yes" is no reason


def oversized(root: Path, folders: tuple[str, ...]) -> dict[str, int]:
    """Modules under ``folders`` longer than ``MAX_LINES`` lines without a reason given, with
    their line counts, keyed by path relative to ``root``."""
    out = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES and long_reason(path) is None:
                out[path.relative_to(root).as_posix()] = n
    return out


# ---- the rules, on this repository ------------------------------------------------------------


def test_collect_never_imports_replay() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.collect.logs.textlogs" in graph and "telemetry.replay.timeline" in graph
    chains = forbidden_chains(graph, "telemetry.collect", "telemetry.replay")
    assert not chains, f"collectors import the simulator ({SOURCE_HOWTO}):\n" + "\n".join(chains)


def test_replay_never_imports_collect() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.replay.runner" in graph and "telemetry.collect.dcgm.scrape" in graph
    chains = forbidden_chains(graph, "telemetry.replay", "telemetry.collect")
    assert not chains, f"the replay engine imports a source ({SOURCE_HOWTO}):\n" + "\n".join(chains)


def test_ingest_imports_no_source() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.ingest.seam" in graph
    chains = forbidden_chains(graph, "telemetry.ingest", "telemetry.collect")
    assert not chains, f"the ingest imports a source ({SOURCE_HOWTO}):\n" + "\n".join(chains)


def test_sources_never_import_each_other() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert {"telemetry.collect.dcgm", "telemetry.collect.logs"} <= set(graph)
    chains = between_sources(graph, "telemetry.collect")
    assert not chains, f"a source imports another ({SOURCE_HOWTO}):\n" + "\n".join(chains)


def test_import_composes_sources_it_does_not_know() -> None:
    """``import`` hands its paths to the registered sources and runs what they yield: it imports
    no source's module (a ``*_source``, the dumps' ``fr_import``), none of the store's own (it
    writes through the writer, as every source), and checks no source's class."""
    path = ROOT / "app/commands/import_.py"
    graph = import_graph(ROOT, ("telemetry", "app"))
    known = [m for m in graph["app.commands.import_"] if m.startswith("telemetry.")]
    wrong = [m for m in known if m.rsplit(".", 1)[-1].endswith(("_source", "fr_import"))
             or m.startswith("telemetry.store.")]  # fmt: skip
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typed = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"
        and "Source" in ast.unparse(node.args[1])
    ]  # fmt: skip
    assert not wrong and not typed, f"import knows its sources ({SOURCE_HOWTO}): {wrong + typed}"


def test_store_imports_no_source_no_ingest_and_no_derive() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.store.store" in graph and "telemetry.derive.derive" in graph
    chains = [
        chain
        for banned in ("telemetry.collect", "telemetry.ingest", "telemetry.derive")
        for chain in forbidden_chains(graph, "telemetry.store", banned)
    ]
    why = f"the store imports a source, the ingest or derive ({METRIC_HOWTO}):\n"
    assert not chains, why + "\n".join(chains)


def test_collect_never_imports_derive() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.collect.logs.textlogs" in graph and "telemetry.signals" in graph
    chains = forbidden_chains(graph, "telemetry.collect", "telemetry.derive")
    why = f"a source imports derive; the signal kinds are telemetry.signals ({SOURCE_HOWTO}):\n"
    assert not chains, why + "\n".join(chains)


def triggers(root: Path, folders: tuple[str, ...]) -> list[str]:
    """``path:line`` of every call of a step's work (``STEP_WORK``) outside ``STEP_CALLERS``
    (a ``def`` of it is no call)."""
    out = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in STEP_CALLERS:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if STEP_WORK.search(line) and not line.lstrip().startswith("def "):
                    out.append(f"{rel}:{n}: {line.strip()}")
    return out


def test_only_the_writer_runs_what_follows_a_write() -> None:
    found = triggers(ROOT, ("telemetry", "app"))
    why = f"post-write work triggered outside telemetry/after_write.py ({METRIC_HOWTO}):\n"
    assert not found, why + "\n".join(found)


def test_metrics_never_import_the_ingest() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.metrics.goodput" in graph and "telemetry.ingest.writer" in graph
    chains = forbidden_chains(graph, "telemetry.metrics", "telemetry.ingest")
    assert not chains, f"a metric imports the ingest ({METRIC_HOWTO}):\n" + "\n".join(chains)


def test_queries_never_import_a_metric() -> None:
    graph = import_graph(ROOT, ("telemetry",))
    assert "telemetry.queries.overview" in graph and "telemetry.metrics.alert_rules" in graph
    chains = forbidden_chains(graph, "telemetry.queries", "telemetry.metrics")
    assert not chains, f"a query imports a metric ({METRIC_HOWTO}):\n" + "\n".join(chains)


def sql_in(folder: Path) -> list[str]:
    """``path:line`` of each SQL statement (a string that starts with a statement's word) or
    store read (``.df``, ``.rows``, ``.scalar``, ``.execute``) in the modules under ``folder``."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = node.value if isinstance(node, ast.Constant) else None
            sql = isinstance(text, str) and bool(_SQL_RE.match(text))
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if sql or (call and node.func.attr in _STORE_READS):  # type: ignore[union-attr]
                out.append(f"{path.relative_to(folder.parent.parent)}:{node.lineno}")
    return out


def test_metrics_run_no_sql_of_their_own() -> None:
    found = sql_in(ROOT / "telemetry" / "metrics")
    assert not found, f"SQL in a metric, not in queries/ ({METRIC_HOWTO}): " + ", ".join(found)


def test_no_two_rooms_import_each_other() -> None:
    pairs = room_pairs(import_graph(ROOT, ("telemetry",)), "telemetry")
    left = [f"{a} <-> {b}" for a, b in pairs]
    assert not left, f"rooms import each other ({METRIC_HOWTO}):\n" + "\n".join(left)


def test_no_import_circles() -> None:
    graph = import_graph(ROOT, ("telemetry", "app"), own_packages=False)
    assert "app.data" in graph and "telemetry.store" in graph
    found = circles(graph)
    assert not found, f"modules import each other ({METRIC_HOWTO}):\n" + "\n".join(found)


def test_no_module_over_the_limit_without_a_reason() -> None:
    over = oversized(ROOT, ("telemetry", "app"))
    for path in PENDING_SPLIT:
        assert over.pop(path, None), f"{path} is within {MAX_LINES} lines: drop it from PENDING"
    assert not over, (
        f"over {MAX_LINES} lines with no '{LONG_MARKER} <reason>' in the docstring: "
        + ", ".join(f"{p} ({n})" for p, n in over.items())
    )


# ---- the checkers, on trees of their own -------------------------------------------------------


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_walk_sees_every_form_of_import(tmp_path: Path) -> None:
    for rel in ("pkg/__init__.py", "pkg/sim/__init__.py", "pkg/sim/engine.py", "pkg/words.py"):
        _write(tmp_path, rel, "")
    forms = {
        "plain": "import pkg.sim.engine\n",
        "from_module": "from pkg.sim.engine import run\n",
        "from_package": "from pkg.sim import engine\n",
        "relative": "from ..sim import engine\n",
        "in_function": "def f():\n    from pkg.sim.engine import run\n    return run\n",
        "via_another": "from pkg.src.plain import x\n",  # plain imports the simulator
    }
    _write(tmp_path, "pkg/src/__init__.py", "")
    _write(tmp_path, "pkg/src/clean.py", "from pkg.words import W\nfrom ..words import X\n")
    for name, code in forms.items():
        _write(tmp_path, f"pkg/src/{name}.py", code)
    chains = forbidden_chains(import_graph(tmp_path, ("pkg",)), "pkg.src", "pkg.sim")
    starts = {c.split(" -> ")[0] for c in chains}
    assert starts == {f"pkg.src.{name}" for name in forms}
    assert "pkg.src.via_another -> pkg.src.plain -> pkg.sim.engine" in chains


def test_circles_are_found_through_any_import_and_named(tmp_path: Path) -> None:
    trees = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import x\n",
        "pkg/b.py": "def f():\n    from pkg import c\n    return c\n",  # in a function
        "pkg/c.py": "import pkg.a\n",
        "pkg/d.py": "from pkg.a import y\n",  # imports the circle, is not in it
        "pkg/e.py": "from . import f\n",  # relative
        "pkg/f.py": "from pkg.e import z\n",
    }
    for rel, text in trees.items():
        _write(tmp_path, rel, text)
    assert circles(import_graph(tmp_path, ("pkg",), own_packages=False)) == [
        "pkg.a -> pkg.b -> pkg.c -> pkg.a",
        "pkg.e -> pkg.f -> pkg.e",
    ]


def test_a_package_face_is_no_circle_unless_a_module_reads_it(tmp_path: Path) -> None:
    """A package whose ``__init__`` exports from its modules, which import each other through
    the package, is no circle (Python runs the ``__init__`` first); a module that reads a name
    from the ``__init__`` that imports it is one."""
    for rel, text in {
        "face/__init__.py": "from face.core import Thing\n",
        "face/core.py": "from face import util\nfrom face.parts import Part\n",
        "face/util.py": "",
        "face/parts.py": "",
        "loop/__init__.py": "from loop.core import Thing\nLIMIT = 3\n",
        "loop/core.py": "from loop import LIMIT\n",
    }.items():
        _write(tmp_path, rel, text)
    graph = import_graph(tmp_path, ("face", "loop"), own_packages=False)
    assert circles(graph) == ["loop -> loop.core -> loop"]
    assert len(circles(import_graph(tmp_path, ("face", "loop")))) == 2  # every package edge


def test_rooms_importing_each_other_are_found(tmp_path: Path) -> None:
    for rel, text in {
        "pkg/__init__.py": "",
        "pkg/words.py": "",
        "pkg/q/__init__.py": "",
        "pkg/q/a.py": "def f():\n    from pkg.m.g import x\n",  # in a function
        "pkg/q/b.py": "from pkg import words\n",
        "pkg/m/__init__.py": "",
        "pkg/m/g.py": "from pkg.q import b\nfrom pkg.m import h\n",  # its own room too
        "pkg/m/h.py": "from pkg.m import g\n",
        "pkg/r.py": "from pkg.m.h import y\n",  # one way only
    }.items():
        _write(tmp_path, rel, text)
    assert room_pairs(import_graph(tmp_path, ("pkg",)), "pkg") == [("pkg.m", "pkg.q")]


def test_sources_importing_each_other_are_found(tmp_path: Path) -> None:
    for rel, text in {
        "pkg/__init__.py": "",
        "pkg/seam.py": "",
        "pkg/src/__init__.py": "",
        "pkg/src/a/__init__.py": "",
        "pkg/src/a/one.py": "from pkg.seam import S\nfrom pkg.src.a import two\n",  # its own
        "pkg/src/a/two.py": "",
        "pkg/src/b/__init__.py": "",
        "pkg/src/b/one.py": "def f():\n    from pkg.src.c.one import x\n",
        "pkg/src/c/__init__.py": "",
        "pkg/src/c/one.py": "from pkg.src.a import two\n",
    }.items():
        _write(tmp_path, rel, text)
    graph = import_graph(tmp_path, ("pkg",))
    assert between_sources(graph, "pkg.src") == [
        "pkg.src.b.one -> pkg.src.c.one -> pkg.src.a.two",  # through another source
        "pkg.src.b.one -> pkg.src.c.one",
        "pkg.src.c.one -> pkg.src.a.two",
    ]
    allowed = [("pkg.src.c.one", "pkg.src.a.two")]
    assert between_sources(graph, "pkg.src", allowed) == ["pkg.src.b.one -> pkg.src.c.one"]


def test_a_step_triggered_elsewhere_is_found(tmp_path: Path) -> None:
    _write(tmp_path, "telemetry/after_write.py", "store.refresh_rollups()\n")  # the registry
    _write(tmp_path, "telemetry/store/store.py", "    def refresh_rollups(self):\n")
    _write(tmp_path, "telemetry/ingest/sink.py", "x = 1\nself.store.refresh_rollups(since=ts)\n")
    _write(tmp_path, "app/cmd.py", "done = derive.derive(store, runs)\njob_figures.keep(s)\n")
    assert triggers(tmp_path, ("telemetry", "app")) == [
        "telemetry/ingest/sink.py:2: self.store.refresh_rollups(since=ts)",
        "app/cmd.py:1: done = derive.derive(store, runs)",
        "app/cmd.py:2: job_figures.keep(s)",
    ]


def test_the_sql_check_finds_statements_and_store_reads(tmp_path: Path) -> None:
    _write(tmp_path, "telemetry/metrics/a.py", 'Q = """\n  SELECT 1"""\n')
    _write(tmp_path, "telemetry/metrics/b.py", "def f(s):\n    return s.rows(Q)\n")
    words = '"""Select."""\nX = "with care"\n'  # words, then an f-string statement
    _write(tmp_path, "telemetry/metrics/c.py", words + 'Y = f"WITH a AS {X}"\n')
    assert sql_in(tmp_path / "telemetry" / "metrics") == [
        "telemetry/metrics/a.py:1",
        "telemetry/metrics/b.py:2",
        "telemetry/metrics/c.py:3",
    ]


def test_the_length_rule_reads_the_docstring_marker(tmp_path: Path) -> None:
    body = "x = 1\n" * MAX_LINES
    cases = {
        "at_limit.py": '"""Short enough."""\n' + "x = 1\n" * (MAX_LINES - 1),
        "no_reason_given.py": '"""A long one."""\n' + body,
        "reason.py": '"""Parser.\n\nLong module: one state machine, split it and it is two.\n"""\n'
        + body,
        "empty_reason.py": '"""Parser.\n\nLong module: yes\n"""\n' + body,
        "in_a_comment.py": "# Long module: one state machine, cannot be split apart\n" + body,
        "in_a_function.py": 'def f():\n    """Long module: one state machine, cannot split."""\n'
        + body,
    }
    for name, text in cases.items():
        _write(tmp_path, f"src/{name}", text)
    assert oversized(tmp_path, ("src",)) == {
        f"src/{name}": MAX_LINES + n
        for name, n in [("no_reason_given.py", 1), ("empty_reason.py", 4)]
        + [("in_a_comment.py", 1), ("in_a_function.py", 2)]
    }
