"""The Failures page tells a hang's story, in headless Chromium over a store holding the dumps
of a real 6-rank gloo job (``tests/fr_fixture.py``): which collective, which rank never came and
on which host, where it last was in the code and where the others wait. Names from dumps are
rendered as text."""

from __future__ import annotations

import pickle
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.conftest import cli, collect_errors, start_server
from tests.fr_fixture import _fr_store  # noqa: F401 (a fixture)


def test_the_hang_card_names_the_culprit_and_its_host(
    page: Page, fr_store: tuple[Path, Path, str], tmp_path: Path, shots: Path
) -> None:
    store = fr_store[0]
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        errors = collect_errors(page)
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(srv.url + "/failures")
        hang = page.locator("#fail-hangs .card")
        expect(hang).to_have_count(1)
        expect(hang).to_contain_text("gloo:all_reduce #11")
        expect(hang.locator(".hang-culprit")).to_have_text("Culprit: rank 4 on gpu-c")
        expect(hang).to_contain_text("never called by rank(s) 4 of 6")
        first = hang.locator("li").first  # the culprit's own code first, not PyTorch's
        expect(first).to_contain_text("fr_job.py")
        expect(hang).to_contain_text("The others wait in")
        page.screenshot(path=str(shots / "failures-hang.png"), full_page=False)
        hang.locator(".hang-incident").click()  # the hang as an incident (#37, 1)
        expect(page.locator("#inc-title")).to_contain_text("Hang in gloo:all_reduce #11")
        expect(page.locator(".hang-culprit")).to_have_text("Culprit: rank 4 on gpu-c")
        expect(page.locator("#inc-md")).to_contain_text("**Culprit:** rank 4 on gpu-c")
        assert "node=gpu-c" in (page.locator("#inc-link-gpus").get_attribute("href") or "")
        assert errors == [], errors
    finally:
        srv.stop()


def test_hostile_names_in_a_dump_are_text(page: Page, tmp_path: Path) -> None:
    evil = "<img src=x onerror=\"document.title='pwned'\">"
    frames = [{"filename": evil, "line": 1, "name": "<script>alert(1)</script>"}]
    base = {"version": "2.10", "pg_config": {"0": {"name": evil, "desc": evil, "ranks": "[0, 1]"}}}
    for rank, last in ((0, 3), (1, 2)):
        entries = [{"collective_seq_id": s, "pg_id": 0, "process_group": ("0", evil),
                    "profiling_name": evil, "input_sizes": [[8]], "frames": frames,
                    "time_created_ns": 1_790_000_000_000_000_000 + s, "is_p2p": False}
                   for s in range(1, last + 1)]  # fmt: skip
        status = {"0": {"last_enqueued_collective": last, "last_started_collective": -1,
                        "last_completed_collective": 2}}  # fmt: skip
        doc = {**base, "pg_status": status, "entries": entries}
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(doc, protocol=2))
    store = tmp_path / "s.duckdb"
    r = cli("import", "--store", str(store), "--run", "evil", str(tmp_path))
    assert r.returncode == 0 and "rank 1" in r.stdout, r.stdout + r.stderr
    srv = start_server(["serve", "--store", str(store)], tmp_path / "serve.log")
    try:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(srv.url + "/failures")
        hang = page.locator("#fail-hangs .card")
        expect(hang).to_contain_text(evil)  # shown as the characters it is
        expect(hang).to_contain_text("<script>alert(1)</script>")
        assert page.title() != "pwned" and dialogs == []
        assert hang.locator("img").count() == 0 and hang.locator("script").count() == 0
    finally:
        srv.stop()
