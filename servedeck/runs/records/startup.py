"""``startup.json``: what the startup log said, :class:`servedeck.vllm.startup_facts.StartupFacts`
(a result of :mod:`servedeck.vllm`, which sits below the run store)."""

from __future__ import annotations

from servedeck.vllm.startup_facts import StartupFacts

__all__ = ["StartupFacts"]
