"""The words the product shares, and the thresholds behind them, each defined once.

Checkpoint tiers; the interruption category and component every source must agree on (the
simulator writes them, posted records are checked against them, queries and figures pick
them out); and the thresholds that make a GPU hot, idle or busy, which queries count by and
figures draw, so a chart's line and a table's count cannot disagree. Constants only, importing
nothing: collectors, the replay engine, queries and the app may all depend on this module
without depending on each other. (Reference tables loaded from files, such as the Llama 3
interruption causes and XID meanings, are in ``telemetry.reference``.)
"""

from __future__ import annotations

# Checkpoint storage tiers, fastest first, and how the UI names them: in full (the Checkpoints
# page) and short (legends and tables).
TIERS = ("nvme", "pfs", "object")
TIER_LABELS = {"nvme": "NVMe (node-local)", "pfs": "Parallel filesystem", "object": "Object store"}
TIER_SHORT = {"nvme": "NVMe", "pfs": "PFS", "object": "Object store"}

# Interruptions: planned work (not in the Llama 3 table of unexpected causes), and the category
# of GPU-caused failures (those that name a GPU and may report an XID).
PLANNED_COMPONENT = "Planned maintenance"
PLANNED_CATEGORY = "Planned"
GPU_CATEGORY = "GPU"

# GPU thresholds (data semantics; colours are the figures' own).
HOT_C = 85.0  # temperature that counts as hot (NVIDIA's slowdown, and dcgm's red, start at 87)
IDLE_PCT = 5.0  # utilization below this is idle
BUSY_PCT = 50.0  # utilization above this is busy: a GPU (or the fleet) is running the job
