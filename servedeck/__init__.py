"""servedeck: typed vLLM serving profiles, verified compose files, deploys, run records and A/B reports."""

__version__ = "0.1.0"
