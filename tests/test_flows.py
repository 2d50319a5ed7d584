"""The two flows of issue 59, module by module: a job log's line from ``factoryfloor import``
to the Incidents page, and a dcgm-exporter sample to the GPUs page's heatmap.

Each flow is written below as the modules that hold the value (the line or the sample, then
what is made of it: a signal, a row, an evidence entry, a frame, a figure) in the order they
hold it, and how it came to each: ``call`` (the module before imports this one and hands it
the value), ``via`` (handed through an object: a source's ``poll``, a sink's ``write``; this
module defines the name), ``back`` (returned or yielded to a module that called for it: this
module imports the one before, or calls through the name given), ``reads`` (read from the store:
this module names the table). ``docs/architecture.md`` ("Two flows, module by module") shows
the same lists with the counts these tests compute.

What is checked: every module exists and every hop is one the code has; the counts (modules
crossed, modules the value comes back to after leaving them) are the ones the document states
and may not grow; and no module of a flow imports another of it except where a hop of the
flow, or a reason below (an import that carries none of the value), says why. A new import
between two modules of a flow (a callback, a helper asked from further down) fails here until
it is placed in the trace, where it counts. The issue's target is 12 modules and no return.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_layering import import_graph

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
TARGET = (12, 0)  # issue 59: at most 12 modules, no return

CS = "telemetry/collect/logs/cluster_source.py"
TL = "telemetry/collect/logs/textlogs.py"
LR = "telemetry/collect/logs/logranks.py"
LL = "telemetry/collect/logs/logline.py"
INF = "telemetry/derive/inference.py"
EV = "telemetry/derive/evidence.py"
PI = "app/pages/incident.py"
FI = "app/figures/incident.py"
SINK = "telemetry/ingest/sink.py"
INV = "telemetry/ingest/inventory.py"

# The rank-7 NCCL watchdog line of the night's job log (tests/cluster_fixture.py), imported with
# ``factoryfloor import --store s.duckdb --run night slurm-N.out``, to its evidence entry on the
# Incidents page. (module, how it came, the name it came by)
LOG_LINE: list[tuple[str, str, str]] = [
    ("app/commands/import_.py", "start", ""),  # the path given
    ("telemetry/sources.py", "call", "claim"),  # each source's recogniser asked
    (CS, "via", "recognises"),
    ("telemetry/sources.py", "back", ""),
    ("app/commands/import_.py", "back", ""),
    ("telemetry/sources.py", "call", "build"),
    (CS, "via", "build"),
    ("telemetry/sources.py", "back", ""),
    ("app/commands/import_.py", "back", ""),  # the built source, run into the writer
    ("telemetry/ingest/daemon.py", "call", "collect_overlapped"),
    (CS, "via", "poll"),  # _Log reads the block the line is in
    (TL, "call", "LogParser"),  # sieve, in the sieve thread
    ("telemetry/collect/logs/blockscan.py", "call", "scan_block"),  # the lines worth reading
    ("telemetry/collect/logs/logfast.py", "call", "megatron_columns"),  # the candidate lines
    ("telemetry/collect/logs/blockscan.py", "back", ""),
    (TL, "back", ""),
    (CS, "back", ""),  # the block's Scan
    (TL, "via", "feed_block"),
    (LR, "call", "host_label"),  # then split_prefix, task_is_node: the [rank7]: prefix
    (TL, "back", ""),
    (LL, "call", "progress"),  # then checkpoint: not one
    (TL, "back", ""),
    ("telemetry/collect/logs/settings.py", "call", "settings"),
    (TL, "back", ""),
    (LL, "call", "plan"),
    (TL, "back", ""),
    (LR, "call", "summary_field"),
    (TL, "back", ""),
    (LL, "call", "failure"),  # the watchdog signature (pytorch.py's pattern, matched here)
    (TL, "back", ""),
    ("telemetry/collect/logs/logclock.py", "call", "LogClock"),  # _when: the line's time
    ("telemetry/collect/logs/parsers/stamps.py", "via", "stamp"),  # through logline's name
    ("telemetry/collect/logs/logclock.py", "back", "stamp"),
    (TL, "back", ""),
    ("telemetry/signals.py", "call", "clean_line"),  # then the Signal made
    (TL, "back", ""),
    (CS, "back", ""),  # feed_block done
    (TL, "via", "drain"),  # the block's LogBatch
    (CS, "back", ""),
    ("telemetry/signals.py", "call", "signals_frame"),
    (CS, "back", ""),
    ("telemetry/ingest/daemon.py", "back", "poll"),  # yielded: Tables
    ("telemetry/ingest/writer.py", "via", "write"),  # Composing, then StoreWriter
    ("telemetry/store/store.py", "via", "append_many"),  # the signals row stored
    ("telemetry/derive/derive.py", "reads", "signals"),  # the Derive batch's step
    ("telemetry/derive/xid_gpus.py", "call", "name_gpus"),
    ("telemetry/derive/derive.py", "back", ""),
    (INF, "call", "infer_interruptions"),
    (EV, "call", "gather"),  # the line as an Evidence
    (INF, "back", ""),
    ("telemetry/derive/oom.py", "call", "oom_killed"),
    (INF, "back", ""),
    (EV, "call", "roles"),
    (INF, "back", ""),
    ("telemetry/derive/waits.py", "call", "missing_rank"),  # then lost_node, if none
    (INF, "back", ""),
    ("telemetry/derive/agents.py", "call", "agent_gap"),
    (INF, "back", ""),
    ("telemetry/derive/culprit.py", "call", "judge"),  # the cause among the evidence
    (INF, "back", ""),  # the interruption's evidence entry
    ("telemetry/derive/derive.py", "back", ""),  # written to interruptions.evidence
    ("telemetry/queries/failures.py", "reads", "interruptions"),  # interruption_detail
    ("app/data/incident.py", "back", ""),  # incident(): the row with its evidence
    ("telemetry/detection.py", "call", "detection"),
    ("app/data/incident.py", "back", ""),
    (PI, "back", ""),  # the page's callback: _show, _story
    (FI, "call", "where"),  # then restored, lost, identity, failed, noticed, outcome, markdown
    (PI, "back", ""),
    ("app/pages/_interruptions.py", "call", "evidence_item"),  # the line, whole
    (PI, "back", ""),
    (FI, "call", "timeline"),  # the line on the time axis
    (PI, "back", ""),
]

# One GPU's utilization in a dcgm-exporter page (plain text, as the exporter serves it), scraped
# by ``ingest --scrape`` or ``serve --scrape``, to its cell of the GPUs page's heatmap.
DCGM_SAMPLE: list[tuple[str, str, str]] = [
    ("telemetry/ingest/daemon.py", "start", ""),  # run_rounds: a round is due
    ("telemetry/collect/dcgm/scrape_source.py", "via", "poll"),
    ("telemetry/collect/dcgm/scrape.py", "call", "scrape_round"),  # fetch: the page's bytes
    ("telemetry/collect/dcgm/scrape_source.py", "back", ""),  # a Round of Fetches
    ("telemetry/ingest/daemon.py", "back", "poll"),
    ("telemetry/ingest/writer.py", "via", "write"),  # StoreWriter._round
    (SINK, "call", "StoreSink"),  # write
    ("telemetry/ingest/roundparse.py", "call", "parse_round"),  # the page into columns
    (SINK, "back", ""),
    ("telemetry/ingest/dcgm_rows.py", "call", "round_rows"),  # one row per GPU
    (SINK, "back", ""),
    (INV, "via", "take"),  # its target's labels, its gpu_id, what changed
    (SINK, "back", ""),
    ("telemetry/store/store.py", "via", "append_many"),  # gpu_samples and node_tick
    ("telemetry/store/rollups.py", "reads", "node_tick"),  # the round's after-write step
    ("telemetry/queries/gpus.py", "reads", "node_rollup"),  # heatmap
    ("app/data/services.py", "back", "query"),  # data.gpu_heatmap = bound(gpuq.heatmap)
    ("app/pages/gpus.py", "back", "together"),  # the page's callback: _fleet
    ("app/figures/gpus.py", "call", "heatmap"),
    ("app/pages/gpus.py", "back", ""),
]

FLOWS = {"log line": LOG_LINE, "dcgm sample": DCGM_SAMPLE}

# Imports between two modules of a flow that carry none of its value: what they bring.
NOT_THE_VALUE: dict[tuple[str, str], str] = {
    ("app/commands/import_.py", "telemetry/ingest/writer.py"): "makes the sink",
    ("app/commands/import_.py", LL): "is_kernel_log: the account printed",
    ("app/commands/import_.py", "telemetry/queries/failures.py"): "the interruptions printed",
    (TL, "telemetry/signals.py"): "the signal kinds (also a hop: clean_line)",
    (TL, "telemetry/collect/logs/settings.py"): "a hop",
    (LL, LR): "split_prefix for strip_prefix, not on this line",
    (LL, "telemetry/signals.py"): "MAX_DETAIL_CHARS",
    (LL, "telemetry/collect/logs/settings.py"): "the settings' prefilter keywords",
    (LL, "telemetry/collect/logs/parsers/stamps.py"): "the stamp re-exported for logclock",
    (LR, "telemetry/signals.py"): "the signal kinds",
    ("telemetry/collect/logs/logclock.py", LL): "Stamp, read through ll.stamp (a hop)",
    ("telemetry/ingest/writer.py", "telemetry/ingest/sink.py"): "the round sink",
    (INF, "telemetry/signals.py"): "the signal kinds",
    (EV, "telemetry/signals.py"): "the signal kinds",
    ("telemetry/derive/culprit.py", EV): "the evidence's roles and types",
    ("telemetry/derive/culprit.py", "telemetry/signals.py"): "the signal kinds",
    ("telemetry/derive/oom.py", EV): "the Evidence type",
    ("telemetry/derive/oom.py", "telemetry/signals.py"): "the signal kinds",
    ("telemetry/derive/waits.py", EV): "the Evidence type and roles",
    ("telemetry/derive/waits.py", "telemetry/signals.py"): "the signal kinds",
    ("telemetry/derive/agents.py", EV): "the Evidence type and roles",
    ("telemetry/derive/agents.py", "telemetry/signals.py"): "the signal kinds",
    ("app/data/incident.py", "app/data/services.py"): "the bound store, prices",
    (PI, "app/data/incident.py"): "a hop (back)",
    ("telemetry/queries/gpus.py", "telemetry/store/rollups.py"): "gpu_table: a table's name",
    ("telemetry/store/store.py", "telemetry/store/rollups.py"): "refresh_rollups runs it",
    ("app/pages/gpus.py", "app/figures/incident.py"): "offender_text",
    ("app/pages/_interruptions.py", "app/data/incident.py"): "an incident's address",
    (CS, "telemetry/collect/logs/logclock.py"): "file_window: when a file's lines may be",
    (INV, "telemetry/ingest/dcgm_rows.py"): "the GpuRows type",
    ("telemetry/collect/logs/blockscan.py", "telemetry/collect/logs/logclock.py"): "Window",
    ("telemetry/collect/logs/blockscan.py", LL): "the prefilter's pattern",
    ("telemetry/collect/logs/logfast.py", "telemetry/collect/logs/logclock.py"): "Window",
    (TL, "telemetry/collect/logs/logfast.py"): "records: column-wise progress points",
    ("telemetry/derive/xid_gpus.py", "telemetry/signals.py"): "line_bus: an XID line's bus",
}


def _module(path: str) -> str:
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def counts(flow: list[tuple[str, str, str]]) -> tuple[int, int, int]:
    """(modules crossed, modules the value comes back to after it left them, modules it
    enters again by a new call: not a caller getting back the answer it waited for)."""
    seen: list[str] = []
    back: set[str] = set()
    again: set[str] = set()
    last = None
    for module, how, _name in flow:
        if module != last and module in seen:
            back.add(module)
            if how != "back":
                again.add(module)
        if module not in seen:
            seen.append(module)
        last = module
    return len(seen), len(back), len(again)


def _defines(path: str, name: str) -> bool:
    text = (ROOT / path).read_text(encoding="utf-8")
    return re.search(rf"^\s*(?:def|class)\s+{re.escape(name)}\b", text, re.M) is not None


def _stated(flow: str) -> tuple[int, int, int]:
    """What docs/architecture.md states of ``flow``: '**The FLOW** crosses N modules; it comes
    back to R of them, and to A of them by a new call'."""
    m = re.search(
        rf"\*\*The {flow}\*\* crosses (\d+) modules; it comes back to (\d+) of them, and to "
        rf"(\d+) of them by a new call",
        " ".join(DOC.read_text().split()),
    )
    assert m, f"docs/architecture.md does not state the {flow}'s counts"
    return int(m[1]), int(m[2]), int(m[3])


def test_every_hop_is_one_the_code_has() -> None:
    graph = import_graph(ROOT, ("app", "telemetry"))
    wrong = []
    for flow, hops in FLOWS.items():
        for (before, _, _), (module, how, name) in zip(hops, hops[1:], strict=False):
            assert (ROOT / module).is_file(), module
            here, there = _module(module), _module(before)
            if how == "call":
                ok = here in graph[there] and (not name or _defines(module, name))
            elif how == "via":
                ok = _defines(module, name) and name in (ROOT / before).read_text()
            elif how == "back":  # by name: this module calls through it (a yield, a wrapper)
                ok = f"{name}(" in (ROOT / module).read_text() if name else there in graph[here]
            elif how == "reads":
                ok = re.search(rf"\b{name}\b", (ROOT / module).read_text()) is not None
            else:
                ok = False
            if not ok:
                wrong.append(f"{flow}: {before} -> {module} ({how} {name})")
    assert not wrong, "hops the code no longer has (update the flow and the document):\n" + (
        "\n".join(wrong)
    )


def test_the_counts_are_the_documented_ones_and_do_not_grow() -> None:
    for flow, hops in FLOWS.items():
        got = counts(hops)
        assert got == _stated(flow), (
            f"the {flow}: {got} (modules, come back to, by a new call); docs/architecture.md "
            f"says {_stated(flow)} (target: {TARGET[0]} modules, no return)"
        )


def test_no_import_between_modules_of_a_flow_goes_unexplained() -> None:
    """An import from one module of a flow to another is a hop of the flow, or carries none of
    its value (``NOT_THE_VALUE``); a new one (a callback, a helper asked from below) is neither
    until the flow says where the value goes through it."""
    graph = import_graph(ROOT, ("app", "telemetry"))
    unexplained = []
    for flow, hops in FLOWS.items():
        paths = {m for m, _, _ in hops}
        by_name = {_module(p): p for p in paths}
        explained = set(NOT_THE_VALUE)
        for (before, _, _), (module, how, _) in zip(hops, hops[1:], strict=False):
            if how in ("call", "via"):
                explained.add((before, module))
            elif how == "back":
                explained.add((module, before))
        for a in sorted(paths):
            for b in sorted(graph[_module(a)] & set(by_name)):
                if (a, by_name[b]) not in explained:
                    unexplained.append(f"{flow}: {a} imports {by_name[b]}")
    assert not unexplained, "\n".join(unexplained)


def test_every_import_said_to_carry_no_value_is_there() -> None:
    graph = import_graph(ROOT, ("app", "telemetry"))
    gone = [f"{a} -> {b}" for a, b in NOT_THE_VALUE if _module(b) not in graph[_module(a)]]
    assert not gone, "NOT_THE_VALUE names imports the code no longer has: " + ", ".join(gone)


def test_counts_count_a_return() -> None:
    a, b, c = ("a", "start", ""), ("b", "call", ""), ("c", "call", "")
    assert counts([a, b, c]) == (3, 0, 0)
    assert counts([a, b, ("a", "back", "")]) == (2, 1, 0)  # an answer back to its caller
    assert counts([a, b, ("a", "back", ""), b]) == (2, 2, 1)  # b asked again: b is returned to


def test_the_sink_asks_the_inventory_once_a_round() -> None:
    """The round's rows pass through the inventory once (``Inventory.take``); apply and learn
    write and remember what it found. A second question (the labels, then the changes) is
    a return to a module the sample had left."""
    tree = ast.parse((ROOT / SINK).read_text(encoding="utf-8"))
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "telemetry.ingest.inventory"
        for a in n.names
    }
    asked = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Attribute)
        and n.func.value.attr == "inventory"
    }
    assert imported == {"GpuIdKey", "Inventory"}
    assert asked == {"take", "apply", "learn"}
