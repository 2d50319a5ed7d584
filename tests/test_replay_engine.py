"""The run-level simulation: determinism, restore logic and calibration against Llama 3."""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np
import pytest
from scipy import stats

from telemetry.reference import LLAMA3_PLANNED, llama3_interruptions
from telemetry.replay.scenarios import SCENARIOS, get_scenario
from telemetry.replay.timeline import Timeline, simulate

REF = {c.component: c for c in llama3_interruptions()}
REF_TOTAL = sum(c.count for c in REF.values())  # 419


@cache
def llama(seed: int) -> Timeline:
    return simulate(get_scenario("llama3-405b"), seed)


def test_same_seed_same_timeline_other_seed_differs() -> None:
    sc = get_scenario("lemon-cooling")
    a, b, c = simulate(sc, 7), simulate(sc, 7), simulate(sc, 8)
    assert a.interruptions == b.interruptions and a.checkpoints == b.checkpoints
    assert a.interruptions != c.interruptions


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_llama3_interruption_counts_match_the_reference(seed: int) -> None:
    tl = llama(seed)
    unexpected = [i for i in tl.interruptions if not i.planned]
    planned = [i for i in tl.interruptions if i.planned]
    # Poisson counts: within 4 standard deviations of the reference means.
    assert abs(len(unexpected) - REF_TOTAL) < 4 * np.sqrt(REF_TOTAL)
    assert abs(len(planned) - LLAMA3_PLANNED) < 4 * np.sqrt(LLAMA3_PLANNED)
    gpu_share = sum(i.category == "GPU" for i in unexpected) / len(unexpected)
    assert 0.57 <= gpu_share <= 0.71  # reference: 268/419 = 64%


def test_llama3_component_mix_is_consistent_with_table_5() -> None:
    """Chi-square goodness of fit of three seeds' pooled component counts (small cells merged)."""
    counts: Counter[str] = Counter()
    for seed in (0, 1, 2):
        counts.update(i.component for i in llama(seed).interruptions if not i.planned)
    big = [c for c in REF.values() if c.count >= 15]
    observed = [counts[c.component] for c in big]
    observed.append(sum(counts.values()) - sum(observed))
    expected = [c.count / REF_TOTAL * sum(counts.values()) for c in big]
    expected.append(sum(counts.values()) - sum(expected))
    assert set(counts) <= set(REF)  # only the reference vocabulary
    _, p = stats.chisquare(observed, expected)
    assert p > 0.001, (observed, expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_llama3_effective_training_time_above_90_percent(seed: int) -> None:
    tl = llama(seed)
    sc = tl.scenario
    productive = sum(s.t1 - s.t0 for s in tl.stretches)
    rework = sum(i.rework_s for i in tl.interruptions)
    ettr = (productive - rework) / sc.duration_s
    assert 0.90 < ettr < 0.97


def test_restore_comes_from_the_newest_surviving_tier() -> None:
    tl = llama(0)
    by_tier = Counter(i.restored_tier for i in tl.interruptions)
    assert by_tier["pfs"] > 0 and by_tier["nvme"] > 0
    for i in tl.interruptions:
        if i.node_lost:
            assert i.restored_tier != "nvme", "a drained node's NVMe copy cannot be restored"
        ok = [
            c
            for c in tl.checkpoints
            if c.status == "ok" and c.end <= i.t and c.step <= i.restored_step + i.lost_steps
        ]
        newest = max((c.step for c in ok if c.tier != "nvme" or not i.node_lost), default=0)
        if not i.planned:
            assert i.restored_step <= newest


def test_gpu_failures_carry_matching_xids() -> None:
    expected = {"GPU HBM3 Memory": {48, 63, 64, 94, 95}, "GPU System Processor": {119, 120}}
    for i in llama(0).interruptions:
        if i.component in expected:
            assert i.xid in expected[i.component]
        if i.category != "GPU":
            assert i.xid is None


def test_every_scenario_is_documented_and_runs() -> None:
    for sc in SCENARIOS.values():
        assert len(sc.description) > 80 and sc.summary
        tl = simulate(sc.with_overrides(days=min(sc.days, 0.5)), 1)
        assert tl.stretches, sc.name


def test_checkpoint_cadence_follows_the_policy() -> None:
    sc = get_scenario("dev-64")
    tl = simulate(sc, 3)
    nvme = [c for c in tl.checkpoints if c.tier == "nvme"]
    pfs = [c for c in tl.checkpoints if c.tier == "pfs" and c.blocking_s == 0]
    gaps = np.diff([c.start for c in nvme])
    assert np.median(gaps) == pytest.approx(sc.checkpoint.nvme_interval_s, rel=0.05)
    assert len(nvme) / max(len(pfs), 1) == pytest.approx(sc.checkpoint.pfs_every, rel=0.2)
