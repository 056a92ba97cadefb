"""Standard tasks: lm-evaluation-harness run against the deployed server through its
OpenAI-compatible API, the per-document scores stored in the run (``lm_eval.json``) and compared
like any metric (:mod:`servedeck.ab.quality`).

lm-evaluation-harness is an optional extra (``pip install 'servedeck[lm-eval]'``: ``lm-eval[api]``,
which needs no torch for its API backends). servedeck calls its Python API
(``lm_eval.simple_evaluate``, ``lm_eval.tasks.TaskManager``; lm-eval 0.4.x) with one of its
OpenAI-compatible backends (``lm_eval/models/openai_completions.py``):

* ``local-chat-completions`` (default): ``/v1/chat/completions``, the chat template applied by the
  server; generation tasks (``generate_until``) only; no tokenizer needed.
* ``local-completions``: ``/v1/completions``; also log-likelihood tasks (multiple choice), which
  need a tokenizer: ``tokenizer_backend: remote`` uses the server's ``/tokenizer_info`` and
  ``/tokenize`` (vLLM with ``--enable-tokenizer-info-endpoint``), ``huggingface`` a local
  tokenizer directory (``tokenizer``; needs ``transformers``).

Tasks are the user's: lm-eval's own task names (their datasets come from the Hugging Face hub) or
task YAML files under ``include_path`` (a local dataset: ``dataset_path: json`` with
``dataset_kwargs.data_files``, relative paths resolved against ``include_path``: lm-eval runs
from there). Requests go one at a time, at the task's own generation settings.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.runs import store
from servedeck.runs.records import LmEvalResult, LmEvalSettings, TaskMetric

__all__ = ["LmEvalResult", "LmEvalSettings", "TaskMetric", "read_lm_eval", "run_lm_eval", "task_metrics"]

INSTALL_HINT = "pip install 'servedeck[lm-eval]' (lm-evaluation-harness with its API backends; no torch needed)"


def read_lm_eval(run_dir: Path) -> LmEvalResult | None:
    """``lm_eval.json`` of a run, typed; None when the run has none.

    Raises:
        ServedeckError: the file is invalid (file and field named).
    """
    return store.read(run_dir, store.LM_EVAL)


def _import_lm_eval():
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError as exc:
        raise ServedeckError(f"lm-evaluation-harness is not installed ({exc.name} missing)",
                             hint=INSTALL_HINT) from None
    return lm_eval, TaskManager


def _task_manager(TaskManager, settings: LmEvalSettings):
    """lm-eval's task index: only ``include_path`` when it holds every task named (indexing
    lm-eval's thousands of built-in tasks takes seconds), else the built-in tasks too.

    Raises:
        ServedeckError: ``include_path`` is not a directory, or a task is unknown.
    """
    include = None
    if settings.include_path:
        include = Path(settings.include_path)
        if not include.is_dir():
            raise ServedeckError("not a directory of task YAML files", file=str(include),
                                 field="--lm-eval-include")
        own = TaskManager(include_path=str(include), include_defaults=False)
        if all(t in own.all_tasks for t in settings.tasks):
            return own
    tm = TaskManager(include_path=str(include) if include else None)
    unknown = [t for t in settings.tasks if t not in tm.all_tasks]
    if unknown:
        raise ServedeckError(f"lm-eval does not know the task(s) {', '.join(unknown)}",
                             field="--lm-eval",
                             hint="name lm-eval tasks (`lm_eval ls tasks`) or give --lm-eval-include DIR with "
                                  "your task YAML files")
    return tm


def run_lm_eval(base_url: str, served_model: str, settings: LmEvalSettings, *,
                api_key: str | None = None) -> LmEvalResult:
    """Evaluate ``settings.tasks`` on the server at ``base_url`` with lm-evaluation-harness.

    Returns:
        the :class:`LmEvalResult` (per-document scores included).

    Raises:
        ServedeckError: lm-eval is not installed, a task is unknown, or the evaluation failed
            (lm-eval's message included).
    """
    lm_eval, TaskManager = _import_lm_eval()
    from servedeck.runs.store import utcnow

    tm = _task_manager(TaskManager, settings)
    chat = settings.backend == "local-chat-completions"
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"
    args: dict[str, Any] = {
        "model": served_model, "base_url": base_url.rstrip("/") + endpoint, "num_concurrent": 1,
        "max_retries": 3, "timeout": settings.timeout_s, "max_gen_toks": settings.max_gen_toks,
        "tokenizer_backend": settings.tokenizer_backend or ("none" if chat else "remote"),
    }
    if settings.tokenizer:
        args["tokenizer"] = settings.tokenizer
    if api_key:
        args["header"] = {"Authorization": f"Bearer {api_key}"}
    started, t0 = utcnow(), time.perf_counter()
    for name in ("lm-eval", "lm_eval"):
        logging.getLogger(name).setLevel(logging.WARNING)
    cwd = os.getcwd()
    try:
        if settings.include_path:  # a task's relative data_files resolve against its directory
            os.chdir(settings.include_path)
        res = lm_eval.simple_evaluate(
            model=settings.backend, model_args=args, tasks=list(settings.tasks), task_manager=tm,
            limit=settings.limit, num_fewshot=settings.num_fewshot, log_samples=True,
            apply_chat_template=chat, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
            fewshot_random_seed=0, bootstrap_iters=1000)
    except ServedeckError:
        raise
    except Exception as exc:  # lm-eval raises anything; the user needs its message
        raise ServedeckError(f"lm-evaluation-harness failed: {type(exc).__name__}: {exc}",
                             hint="check the task names and that the server answers "
                                  f"{endpoint}") from exc
    finally:
        os.chdir(cwd)
    if not res:
        raise ServedeckError("lm-evaluation-harness returned no results")
    return LmEvalResult(lm_eval_version=_version(lm_eval), settings=settings, served_model=served_model,
                        base_url=base_url, started_at=started, finished_at=utcnow(),
                        duration_s=round(time.perf_counter() - t0, 3), task_metrics=task_metrics(res))


def _version(module) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("lm_eval")
    except PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))


def task_metrics(res: dict[str, Any]) -> list[TaskMetric]:
    """:class:`TaskMetric` per task, metric and filter of an lm-eval results document
    (``simple_evaluate``'s return: ``results``, ``higher_is_better``, ``samples``)."""
    out = []
    samples = res.get("samples") or {}
    for task, values in (res.get("results") or {}).items():
        direction = (res.get("higher_is_better") or {}).get(task) or {}
        for key, value in values.items():
            if "," not in key or "_stderr," in key or key.startswith("alias"):
                continue
            metric, filt = key.split(",", 1)
            stderr = values.get(f"{metric}_stderr,{filt}")
            per_doc = {str(s["doc_id"]): float(s[metric]) for s in samples.get(task, [])
                       if s.get("filter", "none") == filt and isinstance(s.get(metric), (int, float))}
            out.append(TaskMetric(task=task, metric=metric, filter=filt,
                                  value=float(value) if isinstance(value, (int, float)) else None,
                                  stderr=float(stderr) if isinstance(stderr, (int, float)) else None,
                                  higher_is_better=bool(direction.get(metric, True)), per_doc=per_doc))
    return out
