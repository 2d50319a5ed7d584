"""One module per ``factoryfloor`` command, each with ``run(settings) -> int`` (the exit code).

``app.cli`` parses the command line into ``app.settings.Settings`` and calls the command's
``run``; what several commands share (the log line, binding checks, a scenario with its
overrides) is in ``common``.
"""
