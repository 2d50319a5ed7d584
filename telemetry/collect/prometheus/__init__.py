"""The Prometheus-API source: DCGM series read from the cluster's Prometheus (``prom_source``)
through its HTTP API (``prom_client``), and its history for the charts (``prom_history``)."""
