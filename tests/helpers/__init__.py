"""What tests share that is not a fixture, one module per kind (#59 item 7): ``paths`` (the
repository's folders), ``procs`` (the real CLI and server in subprocesses, free ports),
``stores`` (seeded and imported stores, the data layer bound to one), ``browser`` (what a
Playwright test does and watches) and ``exporter`` (dcgm-exporter fixture text over HTTP).

Fixtures stay in ``tests/conftest.py``; markers (``ui``, ``live``, ``slow``) are on the test
modules themselves (``pytestmark``). ``tests/conftest.py`` still re-exports these names for
the tests written against it.
"""
