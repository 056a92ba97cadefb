"""Run records: :mod:`~servedeck.runs.store` (the on-disk layout, typed ``run.json``; the only
module that knows run file names), :mod:`~servedeck.runs.history` (listing, ``latest:PROFILE``
and the other run references), :mod:`~servedeck.runs.doc` (``docs/run-record.md``)."""
