"""A one-shot import runs the cyclic collector less often, and leaves it as it was."""

from __future__ import annotations

import gc

import pytest

from telemetry.ingest.daemon import IMPORT_GC_YOUNG, fewer_collections


def test_young_generation_grows_for_the_import_and_comes_back() -> None:
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] >= IMPORT_GC_YOUNG
        assert gc.get_threshold()[1:] == before[1:]
    assert gc.get_threshold() == before


def test_a_collector_turned_off_stays_off() -> None:
    before = gc.get_threshold()
    gc.set_threshold(0, *before[1:])
    try:
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


def test_a_failed_import_leaves_the_collector_as_it_was() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a write failed")
    assert gc.get_threshold() == before
