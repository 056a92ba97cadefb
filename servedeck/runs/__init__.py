"""Run records: :mod:`~servedeck.runs.store` (the on-disk layout and every write and read; the
only module that knows run file names), :mod:`~servedeck.runs.records` (the model of each run
file's content), :mod:`~servedeck.runs.history` (listing, ``latest:PROFILE`` and the other run
references), :mod:`~servedeck.runs.doc` (``docs/run-record.md``, generated from the models)."""
