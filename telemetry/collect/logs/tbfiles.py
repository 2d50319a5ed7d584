"""What TensorBoard names its event files. Apart from the reader (``importers``), which lists
a directory's event files by it, because the format registry (``formats``) recognises them by
it too and must not import the reader with the command line's parser (the reader loads the
store): a module of its own keeps the two from importing each other."""

TB_PREFIX = "events.out.tfevents."
