"""A hang opens as an incident (#37, 1): the flight recorder's hang (which collective, the rank
that never called it and its host, where each was) on its own page with links and Markdown,
and inside the interruption its ranks were stuck in. The night is the cluster fixture's,
imported with the user's command; the hang row is as the dump importer stores it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from app.data import incident as data
from app.figures import incident as fig
from telemetry.store import Store
from tests.cluster_fixture import RUN
from tests.conftest import bound_store, imported_night

HANG_AT = datetime(2026, 3, 1, 9, 53, 40)  # the first failure's stall: its ranks waited here


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = imported_night(tmp_path_factory.mktemp("hang"))
    with Store(str(store)) as s, s.transaction(["hangs"]) as con:
        con.execute(
            """INSERT INTO hangs (run_id, ts, process_group, pg_desc, seq_id, op, input_sizes,
                 dtypes, ranks, missing_ranks, stuck_ranks, culprit_rank, culprit_host, hosts,
                 culprit_frames, waiting_frames, mismatched, story, source)
               VALUES (?, ?, '0', 'default_pg', 91234, 'nccl:all_reduce', '[[1]]', 'Float',
                 64, [59], 63, 59, 'node-7', ['node-7'],
                 ['pretrain_gpt.py:241 train_step', '/torch/distributed/c10d.py:2501 all_reduce'],
                 ['pretrain_gpt.py:245 train_step'], [],
                 'rank 59 never called all_reduce #91234; 63 ranks waited in it', 'dumps')""",
            [RUN, HANG_AT],
        )
    return store


@pytest.fixture
def bound(night: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from bound_store(night, monkeypatch)


def test_the_interruption_carries_the_hang_its_ranks_were_stuck_in(bound: Store) -> None:
    (first, second) = sorted(data.incidents(RUN).query("kind == 'interruption'")["at"])
    inc = data.incident(RUN, first)
    assert inc is not None and [h["seq_id"] for h in inc["hangs"]] == [91234]
    assert data.incident(RUN, second)["hangs"] == []  # the other failure had none
    md = fig.markdown(inc)
    assert "### The hang its ranks were stuck in (flight recorder)" in md
    assert "**Culprit:** rank 59 on node-7" in md and "never called by rank(s) 59" in md


def test_a_hang_opens_as_its_own_incident(bound: Store) -> None:
    listed = data.incidents(RUN)
    hang_row = listed[listed["kind"] == "hang"].iloc[0]
    assert hang_row["component"] == "Hang in nccl:all_reduce #91234"
    h = data.hang(RUN, hang_row["at"])
    assert h is not None and h["culprit_host"] == "node-7"
    assert "node=node-7" in h["links"]["gpus"]
    assert "from=2026-03-01T09%3A23%3A40&to=2026-03-01T10%3A23%3A40" in h["links"]["training"]
    md = fig.hang_markdown(h)
    assert md.startswith("## 2026-03-01 09:53:40 UTC: hang in nccl:all_reduce #91234")
    assert "  - `pretrain_gpt.py:241 train_step`" in md
    assert data.hang(RUN, "2026-03-01T09:00:00") is None and data.hang(RUN, "<x>") is None


def test_the_incident_page_tells_the_hang(bound: Store) -> None:
    from dash import html

    from app.main import create_app

    create_app(bound)
    from app.pages import incident as page

    body = page._show.__wrapped__({"run": RUN}, 0, "dark", HANG_AT.isoformat())
    text = str(body)
    assert "Hang in nccl:all_reduce #91234" in text and "Culprit: rank 59 on node-7" in text
    assert isinstance(body, html.Div)
