"""Interruptions derived from what is stored: ``derive`` feeds the pure engine (``inference``,
with ``evidence`` ranking the causes) from the store and writes its answer back. The words it
reads (the signal kinds) are ``telemetry.signals``, below the sources and the store, which
never import this package; each rank's host is ``telemetry.store.ranks``.

Kept empty on purpose. Import ``telemetry.derive.derive`` for ``derive``, ``open_stall`` and
the rest.
"""
