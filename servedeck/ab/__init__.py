"""A/B comparison of recorded runs, by stage: :mod:`~servedeck.ab.compare` (diff and the
single-variable guard), :mod:`~servedeck.ab.stats` (metrics and verdicts),
:mod:`~servedeck.ab.noise` (A/A noise floors), :mod:`~servedeck.ab.interleave` (interleaved
arms), :mod:`~servedeck.ab.report` (markdown), :mod:`~servedeck.ab.chart` (PNG);
:mod:`~servedeck.ab.experiment` puts them together for the CLI and the demo."""
