"""Factory Floor telemetry: the store, its queries, the collectors and the replay engine.

Nothing in this package imports dash or plotly; presentation lives in ``app/``.
"""
