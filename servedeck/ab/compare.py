"""Single-variable A/B logic: arm differences, the single-variable guard, metric comparison.

Two *arms* are compared view by view; every view is flattened to ``{dotted path: value}``:

* ``profile``   - ``profile.resolved.json`` (servedeck's resolved profile; naming fields such
  as the profile's own ``name``/``description``/``extends`` are ignored),
* ``effective`` - ``effective.json`` (flat dict keyed by vLLM dest names; nested dicts such as
  ``speculative_config`` are flattened to ``speculative_config.num_speculative_tokens``),
* ``compose``   - the rendered ``docker-compose.yml`` parsed with ruamel.yaml (YAML 1.2):
  image reference, environment (``env.NAME``), volumes keyed by container path, devices, ports,
  group_add, shm_size, ipc, ... and the service ``command``, which is split into
* ``argv``      - launcher argv tokens: exl3xpu ``--set vllm.KEY=VALUE`` and vLLM passthrough
  flags (``--max-num-batched-tokens 8192``) both become the vLLM dest name ``max_num_batched_tokens``;
  ``--set env.NAME=V`` becomes ``env.NAME``; exl3xpu's own options become ``launcher.gpu``,
  ``launcher.model_path``, ...; positional tokens ``command.positional[i]``.
  (Launcher contract: ``0xSero/exl3xpu`` ``scripts/serve.py`` v2/v3, see
  ``shared/reference/exl3xpu-image-facts.md`` section 4.)
* ``facts``     - ``facts.json`` host facts (name, kernel, docker/compose version, GPU power cap)
  and image facts (digest -> ``image``, ``vllm_version``),
* ``workload``  - ``workload.json`` (``workload.<path>``).

One logical change shows up in several views (profile field, effective setting, argv token).
Differences are collapsed to one :class:`Variable` per canonical name: vLLM dest names where a
setting maps to vLLM, otherwise the view's own path. Profile paths are attached to another
view's variable when their last path segment equals the variable's last segment, or (failing
that) when exactly one variable changed between the same two values.

Metric comparison (:func:`compare_metrics`) reads ``startup.json`` and ``bench.jsonl`` in the
layout of ``docs/run-record.md``.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from servedeck.compose.document import Mount, parse_document
from servedeck.errors import ServedeckError
from servedeck.vllm import argv as argv_grammar
from servedeck.runs.store import run_dirs, sequence_of
from servedeck.yamlio import flatten, launcher_value

# --------------------------------------------------------------------------------------------
# Views
# --------------------------------------------------------------------------------------------

View = Literal["profile", "effective", "compose", "argv", "facts", "workload"]

#: Preference order for the value shown for a variable (typed, user-facing views first).
_VIEW_PREFERENCE: tuple[str, ...] = ("effective", "argv", "compose", "facts", "workload", "profile")

#: Top-level profile fields that only name the profile; they cannot change a result.
PROFILE_NAMING_FIELDS = frozenset({"name", "description", "extends", "notes", "tags"})

#: Profile paths that only name things (the container's name).
PROFILE_NAMING_PATHS = frozenset({"container.container_name"})

#: Compose service keys that only name things; they cannot change a result.
COMPOSE_NAMING_KEYS = frozenset({"container_name", "labels", "hostname"})

#: exl3xpu ``scripts/serve.py`` own options (not passed to vLLM), mapped to variable names.
LAUNCHER_OPTIONS = {"gpu": "launcher.gpu", "model_path": "launcher.model_path", "dp": "launcher.dp",
                    "print": "launcher.print", "log_dir": "launcher.log_dir"}

#: facts.json paths compared, mapped to variable names.
FACT_PATHS = {
    ("host", "name"): "host.name",
    ("host", "kernel"): "host.kernel",
    ("host", "docker_version"): "host.docker_version",
    ("host", "compose_version"): "host.compose_version",
    ("host", "gpu_power_cap_w"): "host.gpu_power_cap_w",
    ("image", "digest"): "image",
    ("image", "vllm_version"): "vllm_version",
}



@dataclass
class ArmViews:
    """Everything about one arm that can change a result, before flattening.

    Attributes:
        label: how the arm is named in messages (run id, or ``profile NAME``).
        profile: resolved profile dict (``Profile.model_dump(mode="json")``) or None.
        effective: effective engine settings keyed by vLLM dest names, or None.
        compose_text: the compose file text (required).
        workload: benchmark workload dict, or None (not benchmarked / not planned yet).
        facts: ``{"host": {...}, "image": {...}}``, or None (not gathered yet).
        source: the run directory, when the arm is a recorded run.
    """

    label: str
    compose_text: str
    profile: dict | None = None
    effective: dict | None = None
    workload: dict | None = None
    facts: dict | None = None
    source: Path | None = None


class Difference(BaseModel):
    """One difference in one view: ``view`` + ``path`` changed from ``a`` to ``b``.

    ``a``/``b`` are None when the path is absent in that arm (``present_a``/``present_b`` say so).
    """

    model_config = ConfigDict(extra="forbid")
    view: str
    path: str
    a: Any = None
    b: Any = None
    present_a: bool = True
    present_b: bool = True


class Variable(BaseModel):
    """One logical change, e.g. ``max_num_batched_tokens: 4096 -> 8192``, with its evidence."""

    model_config = ConfigDict(extra="forbid")
    name: str
    a: Any = None
    b: Any = None
    present_a: bool = True
    present_b: bool = True
    evidence: list[Difference]

    def describe(self) -> str:
        """``name: A → B`` with ``(absent)`` for a missing side."""
        left = fmt_value(self.a) if self.present_a else "(absent)"
        right = fmt_value(self.b) if self.present_b else "(absent)"
        return f"{self.name}: {left} → {right}"

    def views(self) -> list[str]:
        """Distinct views where the change was seen, in evidence order."""
        return list(dict.fromkeys(d.view for d in self.evidence))


class ArmDiff(BaseModel):
    """The result of comparing two arms.

    Attributes:
        arm_a, arm_b: arm labels (run ids, or ``profile NAME`` for a planned arm).
        differences: every changed variable (collapsed across views), sorted by name.
        compared: views compared in both arms.
        skipped: ``{view: reason}`` for views missing in one or both arms.
    """

    model_config = ConfigDict(extra="forbid")
    arm_a: str
    arm_b: str
    differences: list[Variable]
    compared: list[str]
    skipped: dict[str, str]

    @property
    def single_variable(self) -> Variable | None:
        """The one changed variable, or None when zero or several changed."""
        return self.differences[0] if len(self.differences) == 1 else None

    @property
    def is_identical(self) -> bool:
        """True when nothing that can change a result differs."""
        return not self.differences


# --------------------------------------------------------------------------------------------
# Loading arms
# --------------------------------------------------------------------------------------------

def _read_json(path: Path, *, required: bool) -> Any:
    if not path.exists():
        if required:
            raise ServedeckError("run record file is missing", file=str(path),
                                 hint="is this a servedeck run directory (docs/run-record.md)?")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ServedeckError(f"not valid JSON: {exc.msg} at line {exc.lineno}", file=str(path)) from exc


def load_arm(run_dir: Path) -> ArmViews:
    """Load the comparable views of a recorded run directory.

    Args:
        run_dir: ``runs/<sequence>-<profile>-<host>/`` (layout: ``docs/run-record.md``).

    Returns:
        ArmViews; views whose file is missing are None (``docker-compose.yml`` is required).

    Raises:
        ServedeckError: the directory or its compose file is missing, or a JSON file is invalid.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ServedeckError("run directory does not exist", file=str(run_dir))
    compose = run_dir / "docker-compose.yml"
    if not compose.exists():
        raise ServedeckError("run record has no docker-compose.yml", file=str(run_dir),
                             hint="every run records the deployed compose file verbatim")
    return ArmViews(
        label=run_dir.name,
        compose_text=compose.read_text(encoding="utf-8"),
        profile=_read_json(run_dir / "profile.resolved.json", required=False),
        effective=_read_json(run_dir / "effective.json", required=False),
        workload=_read_json(run_dir / "workload.json", required=False),
        facts=_read_json(run_dir / "facts.json", required=False),
        source=run_dir,
    )


def views_from_profile(profile_views: dict, label: str | None = None) -> ArmViews:
    """Build an arm from a rendered, not yet deployed profile.

    Args:
        profile_views: ``{"profile": dict, "effective": dict, "compose_text": str,
            "workload": dict|None, "facts": dict|None}``.
        label: arm label; default ``profile <profile.name>``.

    Raises:
        ServedeckError: ``compose_text`` is missing or unknown keys are given.
    """
    known = {"profile", "effective", "compose_text", "workload", "facts"}
    unknown = set(profile_views) - known
    if unknown:
        raise ServedeckError(f"unknown profile view keys: {sorted(unknown)}",
                             hint=f"expected some of {sorted(known)}")
    if not profile_views.get("compose_text"):
        raise ServedeckError("the rendered profile has no compose text to compare")
    profile = profile_views.get("profile")
    name = (profile or {}).get("name") if isinstance(profile, dict) else None
    return ArmViews(label=label or f"profile {name or '(unnamed)'}",
                    compose_text=profile_views["compose_text"], profile=profile,
                    effective=profile_views.get("effective"), workload=profile_views.get("workload"),
                    facts=profile_views.get("facts"))


# --------------------------------------------------------------------------------------------
# Flattening
# --------------------------------------------------------------------------------------------

def parse_scalar(text: str) -> Any:
    """A command-line value as the exl3xpu launcher reads it (YAML 1.1 scalar or flow
    collection; the stripped text when it does not parse).

    ``"8192"`` -> 8192, ``"0.94"`` -> 0.94, ``"true"`` -> True, ``"null"`` -> None,
    ``'{"method":"mtp"}'`` -> dict.
    """
    value = launcher_value(text.strip())
    return text.strip() if isinstance(value, str) else value


def flatten_profile(profile: dict) -> dict[str, Any]:
    """Flatten a resolved profile, dropping the top-level naming fields.

    ``null`` and ``{}`` leaves mean "unset" in a profile (the image default applies), so they are
    dropped: an unset field and a field that is absent compare equal, and switching a section
    on (``engine.speculative: null`` -> ``{method: mtp, ...}``) shows as its set leaves only.
    """
    return {path: v for path, v in flatten(profile).items()
            if path.split(".", 1)[0] not in PROFILE_NAMING_FIELDS and path not in PROFILE_NAMING_PATHS
            and v is not None and v != {}}


def flatten_effective(effective: dict) -> dict[str, Any]:
    """Flatten effective settings (keys are vLLM dest names); JSON strings of dicts are parsed."""
    out: dict[str, Any] = {}
    for key, value in effective.items():
        if isinstance(value, str) and value.strip()[:1] == "{":
            value = parse_scalar(value)
        out.update(flatten(value, key))
    return out


def flatten_argv(command: list[str]) -> dict[str, Any]:
    """Map container command tokens to ``{variable: value}``.

    Tokens are read by the argv grammar (:func:`servedeck.vllm.argv.parse_vllm`: ``--flag value``
    and ``--flag=value`` alike, bare ``--flag`` = True, ``--no-flag`` = False, a repeated flag
    keeps the last value as vLLM does, ``--`` dropped). exl3xpu ``--set KEY.PATH=VALUE`` maps to
    KEY (``vllm.`` prefix stripped so the key is vLLM's dest name; value as the launcher's YAML
    1.1 reads it); ``--gpu``/``--model-path``/``--dp``/``--print``/``--log-dir`` are launcher
    options; vLLM values are converted as vLLM does (``16K`` = 16384). JSON values are flattened
    to dotted paths. Positional tokens are ``command.positional[i]``.
    """
    tokens = [str(t) for t in command]
    out: dict[str, Any] = {}
    positional = 0
    for arg in argv_grammar.parse_vllm(tokens):
        if arg.name is None:
            out[f"command.positional[{positional}]"] = parse_scalar(arg.values[0])
            positional += 1
            continue
        name = (arg.name + (f".{arg.subkey}" if arg.subkey else "")).replace("-", "_")
        if name == "set" and arg.value is not None and "=" in arg.value:
            key, val = arg.value.split("=", 1)
            key = key.strip()
            key = key[len("vllm."):] if key.startswith("vllm.") else key
            out.update(flatten(parse_scalar(val), key))
            continue
        if name in LAUNCHER_OPTIONS:
            out[LAUNCHER_OPTIONS[name]] = parse_scalar(arg.value) if arg.values else True
            continue
        if not arg.values:
            out[arg.dest or name] = not arg.negated
            continue
        if len(arg.values) > 1:
            out[name] = [parse_scalar(v) for v in arg.values]
            continue
        value = argv_grammar.convert_lenient(arg.name, arg.value)
        out.update(flatten(parse_scalar(value) if isinstance(value, str) else value, name))
    return out


def parse_compose(compose_text: str, *, source: str = "docker-compose.yml") -> tuple[dict, dict]:
    """Parse a compose file into ``(compose view, argv view)``, both flattened.

    Single-service files use plain paths (``image``, ``env.HF_HOME``, ``compose.devices``);
    with several services each path is prefixed with ``services.<name>.``. Volumes are keyed by
    container path (``compose.volumes[/mnt/exl3model]`` = ``"./models/x:Z"``); devices, ports and
    group_add are compared as sorted lists of strings; keys starting with ``x-`` and naming keys
    (container_name, labels, hostname) are ignored. Format: Compose Specification
    (compose-spec/compose-spec ``spec.md``), read as YAML 1.2 with ruamel.yaml.

    Raises:
        ServedeckError: the text is not YAML or has no ``services`` mapping.
    """
    doc = parse_document(compose_text, file=source)
    compose: dict[str, Any] = {}
    argv: dict[str, Any] = {}
    multi = len(doc.services) > 1
    for svc_name, svc in doc.services.items():
        prefix = f"services.{svc_name}." if multi else ""
        for key in svc.order:
            if key in COMPOSE_NAMING_KEYS or key.startswith("x-"):
                continue
            if key == "image":
                compose[f"{prefix}image"] = svc.image
            elif key == "command":
                argv.update({f"{prefix}{k}": v for k, v in flatten_argv(svc.command or []).items()})
            elif key == "entrypoint":
                compose[f"{prefix}compose.entrypoint"] = svc.entrypoint or []
            elif key == "environment":
                for name, val in svc.environment.values.items():
                    compose[f"{prefix}env.{name}"] = val
            elif key == "volumes":
                for vol in svc.volumes:
                    compose[f"{prefix}compose.volumes[{vol.target}]"] = _volume_rest(vol)
            elif key in ("devices", "ports"):
                compose[f"{prefix}compose.{key}"] = sorted(_item_str(v.dump()) for v in getattr(svc, key))
            elif key in ("group_add", "cap_add", "security_opt", "dns"):
                compose[f"{prefix}compose.{key}"] = sorted(_item_str(v) for v in svc.extra[key] or [])
            else:
                for path, leaf in flatten(svc.extra[key], f"{prefix}compose.{key}").items():
                    compose[path] = leaf
    for key, value in doc.extra.items():
        if key in ("name", "version") or key.startswith("x-"):
            continue
        compose.update(flatten(value, f"compose.{key}"))
    return compose, argv


def _item_str(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _volume_rest(vol: Mount) -> str:
    """A volume's value keyed by its target: ``source[:mode]``, long syntax as sorted JSON."""
    if vol.long:
        return json.dumps({k: v for k, v in vol.dump().items() if k != "target"}, sort_keys=True)
    if vol.source is None:
        return "(anonymous)"
    return ":".join([vol.source, *([vol.mode] if vol.mode else [])])


def flatten_facts(facts: dict) -> dict[str, Any]:
    """Pick the comparable host and image facts (see :data:`FACT_PATHS`)."""
    out: dict[str, Any] = {}
    for (section, key), name in FACT_PATHS.items():
        sec = facts.get(section) or {}
        if key in sec:
            out[name] = sec[key]
    return out


def arm_views_flat(arm: ArmViews) -> dict[str, dict[str, Any] | None]:
    """Flatten every view of an arm: ``{view: {path: value}}``, None for an absent view."""
    compose, argv = parse_compose(arm.compose_text,
                                  source=str(arm.source / "docker-compose.yml") if arm.source else arm.label)
    return {
        "profile": flatten_profile(arm.profile) if arm.profile is not None else None,
        "effective": flatten_effective(arm.effective) if arm.effective is not None else None,
        "compose": compose,
        "argv": argv,
        "facts": flatten_facts(arm.facts) if arm.facts is not None else None,
        "workload": flatten(arm.workload, "workload") if arm.workload is not None else None,
    }


# --------------------------------------------------------------------------------------------
# Diff and collapse
# --------------------------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    """Equality that keeps ``True`` and ``1`` apart (a bool flag is not a count)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _norm(value: Any) -> str:
    """Canonical text used to match equal values seen in different views."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value).strip().lower()


def _values_match(d: Difference, v: Variable) -> bool:
    if (d.present_a, d.present_b) != (v.present_a, v.present_b):
        return False
    pairs = ((d.a, v.a), (d.b, v.b))
    for x, y in pairs:
        if x is None and y is None:
            continue
        nx, ny = _norm(x), _norm(y)
        if nx == ny:
            continue
        # an image digest inside a reference, a relative path inside an absolute one
        if len(nx) >= 12 and len(ny) >= 12 and (nx in ny or ny in nx):
            continue
        return False
    return True


def diff_views(a: ArmViews, b: ArmViews) -> ArmDiff:
    """Compare two arms view by view and collapse the differences into variables.

    Views absent in either arm are listed in ``ArmDiff.skipped`` and not compared.
    """
    flat_a, flat_b = arm_views_flat(a), arm_views_flat(b)
    raw: list[Difference] = []
    compared: list[str] = []
    skipped: dict[str, str] = {}
    for view in ("effective", "argv", "compose", "facts", "workload", "profile"):
        va, vb = flat_a[view], flat_b[view]
        if va is None or vb is None:
            missing = [lbl for lbl, v in ((a.label, va), (b.label, vb)) if v is None]
            skipped[view] = f"not available for {', '.join(missing)}"
            continue
        compared.append(view)
        for path in sorted(set(va) | set(vb)):
            in_a, in_b = path in va, path in vb
            if in_a and in_b and _same(va[path], vb[path]):
                continue
            raw.append(Difference(view=view, path=path, a=va.get(path), b=vb.get(path),
                                  present_a=in_a, present_b=in_b))
    settled = {}
    if flat_a["effective"] is not None and flat_b["effective"] is not None:
        settled = {k: v for k, v in flat_a["effective"].items()
                   if k in flat_b["effective"] and _same(v, flat_b["effective"][k])}
    return ArmDiff(arm_a=a.label, arm_b=b.label, differences=collapse(raw, settled),
                   compared=compared, skipped=skipped)


def _variable_name(d: Difference) -> str:
    if d.view in ("effective", "argv", "compose", "facts", "workload"):
        return d.path
    return f"profile.{d.path}"


def collapse(raw: list[Difference], settled: dict[str, Any] | None = None) -> list[Variable]:
    """Group per-view differences into logical variables.

    Non-profile differences are grouped by their canonical name (vLLM dest name, ``env.NAME``,
    ``image``, ``compose.<key>``, ``host.<fact>``, ``workload.<path>``). Each profile difference
    joins the variable whose last path segment equals its own last segment (when exactly one
    does), else the one variable changed between the same two values. A profile difference
    that joins nothing is dropped when ``settled`` (effective settings equal in both arms)
    holds exactly one key with the same last segment: the profile now spells out what was
    already in effect (e.g. ``speculative.method: mtp``, the image default). Otherwise it becomes
    its own variable ``profile.<path>``.
    """
    settled = settled or {}
    by_name: dict[str, list[Difference]] = {}
    profile_diffs: list[Difference] = []
    for d in raw:
        if d.view == "profile":
            profile_diffs.append(d)
        else:
            by_name.setdefault(_variable_name(d), []).append(d)
    variables = {name: _make_variable(name, ds) for name, ds in by_name.items()}
    for d in profile_diffs:
        leaf = d.path.rsplit(".", 1)[-1]
        by_leaf = [v for n, v in variables.items()
                   if n.rsplit(".", 1)[-1] == leaf and not n.startswith("profile.")]
        target = by_leaf[0] if len(by_leaf) == 1 else None
        if target is None:
            candidates = by_leaf or [v for n, v in variables.items() if not n.startswith("profile.")]
            by_value = [v for v in candidates if _values_match(d, v)]
            target = by_value[0] if len(by_value) == 1 else None
        if target is None and not by_leaf:
            same_leaf = [k for k in settled if k.rsplit(".", 1)[-1] == leaf]
            if len(same_leaf) == 1:
                continue
        if target is None:
            name = _variable_name(d)
            variables[name] = _make_variable(name, [d])
        else:
            target.evidence.append(d)
    return sorted(variables.values(), key=lambda v: v.name)


def _make_variable(name: str, evidence: list[Difference]) -> Variable:
    best = min(evidence, key=lambda d: _VIEW_PREFERENCE.index(d.view))
    return Variable(name=name, a=best.a, b=best.b, present_a=best.present_a,
                    present_b=best.present_b, evidence=list(evidence))


def compare_arms(run_a: Path, run_b: Path) -> ArmDiff:
    """Compare two recorded runs (arm A = baseline, arm B = variant).

    Args:
        run_a, run_b: run directories (``runs/<id>/``, layout ``docs/run-record.md``).

    Returns:
        ArmDiff whose ``single_variable`` is the one changed variable (or None).

    Raises:
        ServedeckError: a run directory or its compose file is missing / unreadable.
    """
    return diff_views(load_arm(Path(run_a)), load_arm(Path(run_b)))


def plan_against(profile_views: dict, run_b: Path) -> ArmDiff:
    """Compare a rendered, not yet deployed profile with a recorded run (``invoke plan --against``).

    Args:
        profile_views: ``{"profile", "effective", "compose_text", "workload", "facts"}`` of the
            rendered profile (workload/facts may be None: those views are then skipped).
        run_b: the recorded run to compare against. It is the baseline, so in the returned
            ArmDiff it is arm A and the planned profile is arm B (``a → b`` reads
            "recorded → planned").

    Raises:
        ServedeckError: the run directory is unreadable or ``compose_text`` is missing.
    """
    return diff_views(load_arm(Path(run_b)), views_from_profile(profile_views))


def guard(diff: ArmDiff, allow_multi: bool = False) -> ArmDiff:
    """Refuse an experiment that is not single-variable.

    Returns the diff unchanged when exactly one variable differs, or when ``allow_multi`` is set.

    Raises:
        ServedeckError: nothing differs (not an experiment), or several variables differ and
            ``allow_multi`` is False; the message lists every difference with its views.
    """
    if diff.is_identical:
        raise ServedeckError(
            f"{diff.arm_a} and {diff.arm_b} do not differ in anything that can change a result "
            f"(compared: {', '.join(diff.compared)})",
            hint="change exactly one variable in the profile, or compare repeated runs on purpose")
    if len(diff.differences) > 1 and not allow_multi:
        lines = "; ".join(f"{v.describe()} [{', '.join(v.views())}]" for v in diff.differences)
        raise ServedeckError(
            f"not a single-variable experiment: {len(diff.differences)} variables differ between "
            f"{diff.arm_a} and {diff.arm_b}: {lines}",
            hint="revert all but one change, or pass --allow-multi to report it as MULTI-VARIABLE")
    return diff


def fmt_value(value: Any) -> str:
    """A setting value for display: JSON for containers, ``null``/``true``/``false``, else str."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------------------------
# Metric comparison
# --------------------------------------------------------------------------------------------

#: Startup facts compared, with "lower is better" flags (None: neither).
STARTUP_FACTS: dict[str, bool | None] = {
    "kv_cache_tokens": False,
    "available_kv_cache_gib": False,
    "max_concurrency": False,
    "torch_compile_total_s": True,
    "init_engine_s": True,
    "time_to_ready_s": True,
    "peak_activation_gib": None,
    "model_loading_gib": None,
}

#: Bench metrics compared per phase: name -> lower is better.
BENCH_METRICS: dict[str, bool] = {
    "ttft_s": True,
    "prefill_tok_s": False,
    "decode_tok_s": False,
    "spec_accept_len": False,
}

BENCH_PHASES = ("cold", "warm")
MIN_SAMPLES = 3
CONFIDENCE_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 20261017


class MetricComparison(BaseModel):
    """One metric in both arms.

    Attributes:
        name: metric name (``kv_cache_tokens``, ``decode_tok_s``, ...).
        phase: ``startup`` or the bench phase (``cold``/``warm``).
        a, b: the arm values (median of the samples for bench metrics), None when absent.
        samples_a, samples_b: the per-request samples (startup facts: the one value).
        difference: ``b - a``; ratio: ``b / a`` (None when undefined).
        ci_low, ci_high: 95 % bootstrap interval of the ratio of medians (judged metrics only).
        lower_is_better: direction (None: no preferred direction).
        verdict: bench: ``faster``/``slower``/``within noise``; startup: ``higher``/``lower``/
            ``same``; ``single sample`` for bench metrics with too few samples; ``missing``.
        judged: True when a noise verdict was computed from repeated samples.
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    phase: str
    a: float | None
    b: float | None
    samples_a: list[float]
    samples_b: list[float]
    difference: float | None
    ratio: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    lower_is_better: bool | None
    verdict: str
    judged: bool

    @property
    def key(self) -> str:
        """``phase name`` as used in sentences (``warm decode_tok_s``)."""
        return self.name if self.phase == "startup" else f"{self.phase} {self.name}"


class WarningChange(BaseModel):
    """A startup warning and in which arms it appears."""

    model_config = ConfigDict(extra="forbid")
    id: str
    text_a: str | None
    text_b: str | None

    @property
    def status(self) -> str:
        """``present in A, absent in B`` / ``absent in A, present in B`` / ``present in both``."""
        if self.text_a is not None and self.text_b is None:
            return "present in A, absent in B"
        if self.text_a is None and self.text_b is not None:
            return "absent in A, present in B"
        return "present in both"

    @property
    def short(self) -> str:
        """The warning's first clause, e.g. ``max_num_scheduled_tokens is set to 4096``."""
        return short_warning(self.text_a if self.text_a is not None else self.text_b or self.id)


class Comparison(BaseModel):
    """Metric comparison of two runs: startup facts, bench metrics per phase, warnings."""

    model_config = ConfigDict(extra="forbid")
    arm_a: str
    arm_b: str
    startup: list[MetricComparison]
    bench: list[MetricComparison]
    warnings: list[WarningChange]
    startup_a: dict
    startup_b: dict

    def metric(self, name: str, phase: str = "startup") -> MetricComparison | None:
        """The comparison of ``name`` in ``phase`` (``startup``, ``cold``, ``warm``), or None."""
        for m in [*self.startup, *self.bench]:
            if m.name == name and m.phase == phase:
                return m
        return None


def short_warning(text: str) -> str:
    """Shorten a vLLM warning to its first clause (before ``based on``, ``.``, ``;``)."""
    cut = text
    for marker in (" based on ", ". ", "; "):
        idx = cut.find(marker)
        if idx > 0:
            cut = cut[:idx]
    return cut.strip().rstrip(".")


def read_samples(run_dir: Path) -> list[dict]:
    """Read ``bench.jsonl`` (one JSON sample per line); [] when the run was not benchmarked.

    Raises:
        ServedeckError: a line is not valid JSON (file and line number given).
    """
    path = Path(run_dir) / "bench.jsonl"
    if not path.exists():
        return []
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ServedeckError(f"not valid JSON: {exc.msg}", file=str(path),
                                 field=f"line {lineno}") from exc
    return out


def phase_samples(samples: list[dict], phase: str, metric: str) -> list[float]:
    """Values of ``metric`` for ``phase``; ``spec_accept_len`` (and ``server.*``) come from
    each sample's ``server`` block. Missing/None values are skipped."""
    out = []
    for s in samples:
        if s.get("phase") != phase:
            continue
        value = s.get(metric)
        if metric == "spec_accept_len" or value is None:
            value = (s.get("server") or {}).get(metric, value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append(float(value))
    return out


def _ratio_of_medians(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.median(y, axis=axis) / np.median(x, axis=axis)


def ratio_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """95 % bootstrap interval of ``median(b) / median(a)`` (two independent samples).

    ``scipy.stats.bootstrap`` with ``paired=False``, percentile method, 9999 resamples and a
    fixed ``random_state`` so reports are reproducible. When every resample gives the same
    ratio (identical samples) the interval collapses to that ratio.
    """
    from scipy.stats import bootstrap

    xa, xb = np.asarray(a, float), np.asarray(b, float)
    point = float(_ratio_of_medians(xa, xb))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap((xa, xb), _ratio_of_medians, paired=False, vectorized=True,
                        confidence_level=CONFIDENCE_LEVEL, n_resamples=BOOTSTRAP_RESAMPLES,
                        method="percentile", random_state=BOOTSTRAP_SEED)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = point
    return low, high


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _diff_ratio(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    if a is None or b is None:
        return None, None
    return b - a, (b / a if a != 0 else None)


def compare_bench_metric(name: str, phase: str, a: list[float], b: list[float]) -> MetricComparison:
    """Compare one bench metric's samples; judge noise when both arms have >= 3 samples.

    Verdict: the ratio interval entirely above 1 means B is higher, entirely below 1 lower;
    with ``lower_is_better`` higher means ``slower``. Otherwise ``within noise``.
    """
    lower = BENCH_METRICS[name]
    ma, mb = _median(a), _median(b)
    diff, ratio = _diff_ratio(ma, mb)
    common = dict(name=name, phase=phase, a=ma, b=mb, samples_a=a, samples_b=b,
                  difference=diff, ratio=ratio, lower_is_better=lower)
    if ma is None or mb is None:
        return MetricComparison(**common, verdict="missing", judged=False)
    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES or ratio is None:
        return MetricComparison(**common, verdict="single sample", judged=False)
    low, high = ratio_interval(a, b)
    if low > 1.0:
        verdict = "slower" if lower else "faster"
    elif high < 1.0:
        verdict = "faster" if lower else "slower"
    else:
        verdict = "within noise"
    return MetricComparison(**common, ci_low=low, ci_high=high, verdict=verdict, judged=True)


def compare_startup_fact(name: str, a: Any, b: Any) -> MetricComparison:
    """Compare one startup fact (always one sample per arm: described, never judged)."""
    fa = float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None
    fb = float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else None
    diff, ratio = _diff_ratio(fa, fb)
    if fa is None and fb is None:
        verdict = "not in either log"
    elif fa is None or fb is None:
        verdict = "missing"
    elif fb > fa:
        verdict = "higher"
    elif fb < fa:
        verdict = "lower"
    else:
        verdict = "same"
    return MetricComparison(name=name, phase="startup", a=fa, b=fb,
                            samples_a=[fa] if fa is not None else [],
                            samples_b=[fb] if fb is not None else [],
                            difference=diff, ratio=ratio, lower_is_better=STARTUP_FACTS.get(name),
                            verdict=verdict, judged=False)


def compare_warnings(startup_a: dict, startup_b: dict) -> list[WarningChange]:
    """Startup warnings by id, in first-seen order (A then B)."""
    def by_id(startup: dict) -> dict[str, str]:
        out: dict[str, str] = {}
        for w in startup.get("warnings") or []:
            out.setdefault(str(w.get("id") or w.get("text")), str(w.get("text") or w.get("id")))
        return out

    wa, wb = by_id(startup_a), by_id(startup_b)
    return [WarningChange(id=i, text_a=wa.get(i), text_b=wb.get(i)) for i in dict.fromkeys([*wa, *wb])]


def _startup_facts(run_dir: Path) -> dict:
    """``startup.json``, with the facts it lacks filled from ``startup.log`` by the current
    parser when the run keeps its log (records written by an earlier parser miss some)."""
    from servedeck.vllm.startup_log import record_facts
    log = run_dir / "startup.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else None
    return record_facts(_read_json(run_dir / "startup.json", required=False), text)


def compare_metrics(run_a: Path, run_b: Path) -> Comparison:
    """Compare startup facts, bench metrics and warnings of two recorded runs.

    Reads ``startup.json`` (gaps filled from ``startup.log`` when the run has it) and
    ``bench.jsonl`` (layout ``docs/run-record.md``); a missing file
    gives ``missing`` verdicts rather than an error. Bench metrics are compared for the ``cold``
    and ``warm`` phases (``warmup`` samples are excluded) whenever either arm has samples.

    Raises:
        ServedeckError: a JSON file is invalid.
    """
    run_a, run_b = Path(run_a), Path(run_b)
    sa, sb = _startup_facts(run_a), _startup_facts(run_b)
    startup = [compare_startup_fact(n, sa.get(n), sb.get(n)) for n in STARTUP_FACTS]
    samples_a, samples_b = read_samples(run_a), read_samples(run_b)
    bench = []
    for phase in BENCH_PHASES:
        for metric in BENCH_METRICS:
            a = phase_samples(samples_a, phase, metric)
            b = phase_samples(samples_b, phase, metric)
            if a or b:
                bench.append(compare_bench_metric(metric, phase, a, b))
    return Comparison(arm_a=run_a.name, arm_b=run_b.name, startup=startup, bench=bench,
                      warnings=compare_warnings(sa, sb), startup_a=sa, startup_b=sb)


# --------------------------------------------------------------------------------------------
# History
# --------------------------------------------------------------------------------------------

class RunSummary(BaseModel):
    """One line of run history.

    Attributes:
        run_id: directory name (``0003-batch-8192-b70``); sequence: its counter.
        started_at: ISO time from run.json (None when missing); host, profile, outcome: run.json.
        kv_cache_tokens: from startup.json; warm_decode_tok_s: median of warm ``decode_tok_s``
            samples; cold_ttft_s: median of cold ``ttft_s`` samples (None when not benchmarked).
    """

    model_config = ConfigDict(extra="forbid")
    run_id: str
    sequence: int
    started_at: str | None
    host: str | None
    profile: str | None
    outcome: str | None
    kv_cache_tokens: int | None
    warm_decode_tok_s: float | None
    cold_ttft_s: float | None
    path: Path


def _run_dirs(runs_dir: Path) -> list[tuple[int, Path]]:
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise ServedeckError("runs directory does not exist", file=str(runs_dir),
                             hint="deploy once (invoke deploy) to create the first run record")
    return run_dirs(runs_dir)


def _run_meta(run_dir: Path) -> dict:
    try:
        meta = _read_json(run_dir / "run.json", required=False)
    except ServedeckError:
        meta = None
    return meta if isinstance(meta, dict) else {}


def _profile_of(run_dir: Path, meta: dict) -> str | None:
    if meta.get("profile"):
        return str(meta["profile"])
    parts = run_dir.name.split("-", 1)
    if len(parts) == 2 and "-" in parts[1]:
        return parts[1].rsplit("-", 1)[0]
    return None


def resolve_run(runs_dir: Path, ref: str) -> Path:
    """Resolve a run reference to its directory.

    Accepted forms: a run id (``0003-batch-8192-b70``), a sequence number (``3`` or ``0003``),
    ``latest`` (highest sequence), ``latest:PROFILE`` (highest sequence of that profile, as
    recorded in run.json ``profile``), or a path to a run directory.

    Raises:
        ServedeckError: the reference matches no run (the message lists the runs that exist).
    """
    ref = str(ref).strip()
    runs = _run_dirs(runs_dir)
    existing = ", ".join(d.name for _, d in runs) or "(none)"

    def unknown(what: str) -> ServedeckError:
        return ServedeckError(f"{what}; runs in {runs_dir}: {existing}",
                              hint="use a run id, a sequence number, latest or latest:PROFILE")

    if ref == "latest":
        if not runs:
            raise unknown("no runs recorded yet")
        return runs[-1][1]
    if ref.startswith("latest:"):
        profile = ref.split(":", 1)[1]
        matching = [d for _, d in runs if _profile_of(d, _run_meta(d)) == profile]
        if not matching:
            known = sorted({p for _, d in runs if (p := _profile_of(d, _run_meta(d)))})
            raise ServedeckError(f"no run of profile {profile!r}; profiles with runs: "
                                 f"{', '.join(known) or '(none)'}", hint=f"runs: {existing}")
        return matching[-1]
    if ref.isdigit():
        seq = int(ref)
        for s, d in runs:
            if s == seq:
                return d
        raise unknown(f"no run with sequence {seq}")
    for _, d in runs:
        if d.name == ref:
            return d
    as_path = Path(ref)
    if as_path.is_dir() and (as_path / "docker-compose.yml").exists():
        return as_path
    raise unknown(f"unknown run {ref!r}")


def summarize_run(run_dir: Path) -> RunSummary:
    """Build the history line of one run directory (missing files give None fields)."""
    run_dir = Path(run_dir)
    meta = _run_meta(run_dir)
    try:
        startup = _read_json(run_dir / "startup.json", required=False) or {}
    except ServedeckError:
        startup = {}
    try:
        samples = read_samples(run_dir)
    except ServedeckError:
        samples = []
    kv = startup.get("kv_cache_tokens")
    return RunSummary(
        run_id=run_dir.name, sequence=int(meta.get("sequence") or sequence_of(run_dir) or 0),
        started_at=meta.get("started_at"), host=meta.get("host"),
        profile=_profile_of(run_dir, meta), outcome=meta.get("outcome"),
        kv_cache_tokens=int(kv) if isinstance(kv, (int, float)) else None,
        warm_decode_tok_s=_median(phase_samples(samples, "warm", "decode_tok_s")),
        cold_ttft_s=_median(phase_samples(samples, "cold", "ttft_s")),
        path=run_dir)


def list_runs(runs_dir: Path, profile: str | None = None) -> list[RunSummary]:
    """Run history, oldest first, optionally only runs of ``profile``.

    Raises:
        ServedeckError: ``runs_dir`` does not exist.
    """
    out = [summarize_run(d) for _, d in _run_dirs(runs_dir)]
    return [r for r in out if profile is None or r.profile == profile]
