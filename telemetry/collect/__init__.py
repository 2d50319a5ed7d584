"""The sources: what real clusters expose, one package each (``dcgm``, ``prometheus``,
``logs``, ``checkpoints``, ``slurm``), turned into the batches of ``telemetry.ingest.seam``.
A source imports the ingest, the store and the vocabularies, never another source
(tests/test_layering.py); ``telemetry.sources`` is the one registry of them."""
