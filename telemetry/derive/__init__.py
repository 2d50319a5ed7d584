"""Interruptions derived from what is stored: ``derive`` feeds the pure engine (``inference``,
with ``evidence`` ranking the causes) from the store and writes its answer back; ``signals``
is the vocabulary of failure signals the sources record and the engine reads.

Kept empty on purpose: sources and the store's Slurm SQL import ``signals`` alone, and must not
run the engine (or the store it reads) to do so. Import ``telemetry.derive.derive`` for
``derive``, ``open_stall`` and the rest.
"""
