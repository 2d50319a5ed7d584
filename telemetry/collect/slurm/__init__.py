"""The Slurm source: ``squeue``/``sacct``/``sinfo`` run (``slurm_client``), their output parsed
(``slurm_parse``) and polled into batches (``slurm_source``); the tables' SQL is the store's
(``telemetry.store.slurm_store``)."""
