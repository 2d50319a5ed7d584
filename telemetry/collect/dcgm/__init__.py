"""The dcgm-exporter source: target lists, one scrape round of every exporter (``scrape``, with
the HTTP body reader ``httpbody``) and the source that runs it (``scrape_source``)."""
