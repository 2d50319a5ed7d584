"""Metrics: the figures computed from stored rows at read time (goodput, a run's summary, the
jobs export, recovery spans, the alert rules).

They sit above ``telemetry.queries``: a metric reads through the queries (all SQL lives there,
parameterised) and the queries never import a metric. A metric never imports the ingest: it
reads what was written, it does not write. tests/test_layering.py holds both rules.
"""
