"""The app's data adapters: the one door from pages to ``telemetry``, one module per page.

Pages import nothing from ``telemetry`` (tests/test_architecture.py and ruff's banned-api rule
hold them to it) and never see the ``Store``: ``create_app`` binds one ``Services`` once
(``services.bind``), and every function here takes what a view says (a run, a ``TimeRange``
from ``view.view_range``, a metric or grouping) and returns frames, dicts or small frozen
results. Whatever a page needs computed is computed in ``telemetry``; these modules only
adapt: they clean what a browser sends, pick the options a page uses, and name the vocabulary
pages show (once: what every page shows is ``view``'s).

One pattern: a query a page needs as it is is offered bound to the store
(``name = bound(q.name)``, ``services.bound``); a function here exists only where it does
work. A function that only passes its arguments on fails tests/test_architecture.py.

``pages/X -> data/X -> figures/X -> queries/X``: ``view`` is what every page shares (the view's
run and range, the run list), ``services`` what the serving process hands over once.
"""
