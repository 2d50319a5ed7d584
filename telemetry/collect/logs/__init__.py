"""What training jobs and nodes write: record files (``formats``, ``importers``,
``import_source``), text logs (``textlogs``, ``logline`` with ``parsers``, one module per
framework or launcher, ``logfast``, ``logclock``, ``logranks``) read by the cluster source
(``cluster_source``), and PyTorch flight-recorder dumps (``flight_recorder``, ``fr_read``,
``fr_bounds``, ``fr_worker``, ``fr_import``)."""
