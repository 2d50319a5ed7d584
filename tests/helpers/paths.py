"""The repository's folders, as the tests find them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DCGM_FIXTURES = ROOT / "sample_data" / "dcgm"
SHOTS = ROOT / "screenshots"  # pytest-playwright empties test-results/ at each session start
