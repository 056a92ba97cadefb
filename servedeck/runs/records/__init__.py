"""What every run file holds: one pydantic model per file (``extra="forbid"``).

The run store (:mod:`servedeck.runs.store`) names each file and the model of its content
(:class:`servedeck.runs.store.RunFile`); it validates every write against that model and returns
every read as that model, so a writer that passes an unknown field or a wrong type gets an error
at once instead of a record that drifts from ``docs/run-record.md`` (generated from these models
by :mod:`servedeck.runs.doc`). Listings that need a few fields of many runs (``runs``, the
check's measured start-ups) read the listing cache and never import this package.

The models live in one module per group of run files (:data:`MODULES`: ``run`` for run.json,
``bench`` for the benchmark's files, ``load``, ``quality``, ...) and are imported when a name is
first asked for: ``from servedeck.runs.records import RunMeta`` (or ``records.RunMeta``) imports
:mod:`servedeck.runs.records.run` (and the base) only. Creating a pydantic model class costs
about 1 ms: ``show`` of a benchmarked run creates 5 of the 66 (the base and run.json's), not all
of them (issue 10).

Adding a run file: its model in the module of its group (or a new module, listed in
:data:`MODULES`), its :class:`~servedeck.runs.store.RunFile` line in the store (and in
``RUN_FILES``), its writer calling ``RunRecord.write``; ``show`` displays it and the document
lists it without more code. Adding a field: the field there (with a ``description``) and its
writer. A field of ``facts.json`` that an A/B comparison must see is marked
``compared("name")``: :func:`compared_paths` is what :mod:`servedeck.ab.compare` compares.

Models of files that other stages produce live here too (the benchmark's workload, samples and
summary; an imported external result), because the record is the lower layer: the benchmark
imports its models from here, never the other way round. ``startup.json`` and
``args_verification.json`` hold results of :mod:`servedeck.vllm` (:class:`StartupFacts`,
:class:`ArgCheck`), which sits below the run store.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # every name for the type checker; at run time :func:`__getattr__` imports them
    from servedeck.runs.records.base import *  # noqa: F403
    from servedeck.runs.records.run import *  # noqa: F403
    from servedeck.runs.records.plan import *  # noqa: F403
    from servedeck.runs.records.facts import *  # noqa: F403
    from servedeck.runs.records.startup import *  # noqa: F403
    from servedeck.runs.records.args import *  # noqa: F403
    from servedeck.runs.records.kv import *  # noqa: F403
    from servedeck.runs.records.bench import *  # noqa: F403
    from servedeck.runs.records.external import *  # noqa: F403
    from servedeck.runs.records.sequential import *  # noqa: F403
    from servedeck.runs.records.load import *  # noqa: F403
    from servedeck.runs.records.quality import *  # noqa: F403
    from servedeck.runs.records.lm_eval import *  # noqa: F403
    from servedeck.runs.records.limits import *  # noqa: F403

#: ``{module: the names it defines}``: every name of the package, by the module under
#: ``servedeck.runs.records`` that holds it (a unit test compares each module's ``__all__``).
MODULES: dict[str, tuple[str, ...]] = {
    "base": ("Record",),
    "run": ("Outcome", "FailurePhase", "RecordedImage", "RollbackResult", "ArgsVerificationSummary", "RunMeta"),
    "plan": ("ProfileSnapshot", "EffectiveSettings", "ArgvRecord", "ProfileChange", "ProfileDiff"),
    "facts": ("compared", "GpuDevice", "HostFactsRecord", "ImageFactsRecord", "FactsRecord", "compared_paths"),
    "startup": ("StartupFacts",),
    "args": ("ArgCheck", "ArgsVerification"),
    "kv": ("KvMeasured", "KvError", "KvRecord"),
    "bench": ("CHAT_ENDPOINT", "COMPLETIONS_ENDPOINT", "TagPrefix", "Workload", "ServerDelta", "Sample",
              "MetricStats", "PhaseServer", "BenchSummary"),
    "external": ("RequestCounts", "BenchEntry", "ExternalBench", "ExternalSummary"),
    "sequential": ("SequentialDesign", "Look", "SequentialRecord"),
    "load": ("Percentile", "Proportion", "SLO_METRICS", "SloState", "Slo", "LevelSlo", "LoadKind", "LoadLevel",
             "RequestRecord", "ServerSample", "LevelServer", "LevelResult", "LoadSummary", "SearchStep", "KvCheck",
             "CapacityResult", "ExternalLevel", "ExternalCurve", "CurveSummary"),
    "quality": ("DIRECT_ANSWER_KWARGS", "QualitySettings", "LikelihoodItem", "Likelihood", "GenerationItem",
                "FeatureCheck", "NeedleItem", "QualityResult"),
    "lm_eval": ("LmEvalSettings", "TaskMetric", "LmEvalResult"),
    "limits": ("WindowFigures", "PhaseFigures", "TelemetryRecord", "Ceilings", "ModelCost", "RequestRoofline",
               "PhaseRoofline", "Roofline", "MeasuredCeilings"),
}

_MODULE_OF = {name: module for module, names in MODULES.items() for name in names}

__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """``records.NAME``: imports the module of :data:`MODULES` that holds ``NAME`` (once) and
    keeps the name here.

    Raises:
        AttributeError: no module holds ``NAME``.
    """
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The package's names, those not imported yet included (``dir(records)``, completion)."""
    return sorted({*globals(), *__all__})
