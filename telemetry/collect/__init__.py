"""Collectors: turn what real clusters expose (dcgm-exporter scrapes, training metrics) into
the columnar batches the store appends."""
