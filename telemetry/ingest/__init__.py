"""The ingest: what every source hands its data to, and the one path it takes into the store.

The seam (``seam``: sources, batches, sinks), the collection loop (``daemon``), the store
writer (``writer``) with the scrape-round sink (``sink``: a round's exporter pages parsed by
``exposition``/``roundparse``, shaped into rows by ``dcgm_rows``, GPUs and their labels kept by
``inventory``) and the training records (``records``, ``posted``), the forwarder with its spool
and wire format (``forward``, ``spool``, ``wire``), the server's ingest HTTP API
(``http_api``, ``http``) and Prometheus remote_write (``remote_write``, ``rw_receiver``).

It names no source: the sources (``telemetry.collect``) and the replay engine import it, never
the other way (tests/test_layering.py).
"""
