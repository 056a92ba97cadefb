"""A/B stage 1, diff and guard: what differs between two arms, and the single-variable guard.

Two *arms* are compared view by view; every view is flattened to ``{dotted path: value}``:

* ``profile``   - ``profile.resolved.json`` (servedeck's resolved profile; naming fields such
  as the profile's own ``name``/``description``/``extends`` are ignored),
* ``effective`` - ``effective.json`` (flat dict keyed by vLLM dest names; nested dicts such as
  ``speculative_config`` are flattened to ``speculative_config.num_speculative_tokens``),
* ``compose``   - the rendered ``docker-compose.yml`` parsed with ruamel.yaml (YAML 1.2):
  image reference, environment (``env.NAME``), volumes keyed by container path, devices, ports,
  group_add, shm_size, ipc, ... and the service ``command``, which is split into
* ``argv``      - the command as the service's launcher reads it
  (:meth:`servedeck.launchers.base.Launcher.argv_view`; the service as it will run,
  :class:`servedeck.compose.service.Service`): vLLM flags by dest name
  (``--max-num-batched-tokens 8192`` → ``max_num_batched_tokens``), a launcher's config edits
  under the setting they edit (exl3xpu ``--set vllm.max_num_batched_tokens=8192`` → the same
  ``max_num_batched_tokens``, ``--set env.NAME=V`` → ``env.NAME``), its own options as
  ``launcher.<option>``, positional tokens ``command.positional[i]``.
* ``facts``     - ``facts.json`` (:class:`~servedeck.runs.records.FactsRecord`): the fields its
  model marks as compared (host name, kernel, docker/compose version, GPU power cap; image
  digest -> ``image``, ``vllm_version``),
* ``workload``  - ``workload.json`` (``workload.<path>``; the request counts are not compared:
  :data:`WORKLOAD_SAMPLE_SIZE`).

One logical change shows up in several views (profile field, effective setting, argv token).
Differences are collapsed to one :class:`Variable` per canonical name: vLLM dest names where a
setting maps to vLLM, otherwise the view's own path. Profile paths are attached to another
view's variable when their last path segment equals the variable's last segment, or (failing
that) when exactly one variable changed between the same two values.

The later stages: :mod:`servedeck.ab.stats` (metrics and verdicts), :mod:`servedeck.ab.report`
(markdown), :mod:`servedeck.ab.chart` (PNG).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from servedeck.compose.document import Mount, parse_document
from servedeck.compose.service import read_services
from servedeck.errors import ServedeckError
from servedeck.launchers import registry
from servedeck.launchers.base import Launcher, Token, scalar
from servedeck.launchers.server import of_arguments
from servedeck.runs import store
from servedeck.runs.records import FactsRecord, compared_paths
from servedeck.yamlio import flatten

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

#: Workload fields that count requests (how many samples were taken) rather than define them:
#: not a variable (sequential sampling takes as many as the verdicts need, arm by arm).
WORKLOAD_SAMPLE_SIZE = frozenset({"workload.repetitions", "workload.cold_reps", "workload.warm_reps"})



@dataclass
class ArmViews:
    """Everything about one arm that can change a result, before flattening.

    Attributes:
        label: how the arm is named in messages (run id, or ``profile NAME``).
        profile: resolved profile dict (``Profile.model_dump(mode="json")``) or None.
        effective: effective engine settings keyed by vLLM dest names, or None.
        compose_text: the compose file text (required).
        workload: benchmark workload dict, or None (not benchmarked / not planned yet).
        facts: the host and image facts (``facts.json``), or None (not gathered yet).
        source: the run directory, when the arm is a recorded run.
    """

    label: str
    compose_text: str
    profile: dict | None = None
    effective: dict | None = None
    workload: dict | None = None
    facts: FactsRecord | None = None
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
    profile = store.read(run_dir, store.PROFILE_RESOLVED)
    effective = store.read(run_dir, store.EFFECTIVE)
    workload = store.read(run_dir, store.WORKLOAD)
    return ArmViews(
        label=run_dir.name,
        compose_text=store.read(run_dir, store.COMPOSE, required=True),
        profile=profile.root if profile is not None else None,
        effective=effective.root if effective is not None else None,
        workload=workload.model_dump(mode="json") if workload is not None else None,
        facts=store.read(run_dir, store.FACTS),
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
    facts = profile_views.get("facts")
    return ArmViews(label=label or f"profile {name or '(unnamed)'}",
                    compose_text=profile_views["compose_text"], profile=profile,
                    effective=profile_views.get("effective"), workload=profile_views.get("workload"),
                    facts=FactsRecord.model_validate(facts) if facts is not None else None)


# --------------------------------------------------------------------------------------------
# Flattening
# --------------------------------------------------------------------------------------------

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
            value = scalar(value)
        out.update(flatten(value, key))
    return out


def flatten_argv(command: list[str], launcher: Launcher | None = None) -> dict[str, Any]:
    """Map container command tokens to ``{variable: value}`` as ``launcher`` reads them
    (:meth:`servedeck.launchers.base.Launcher.argv_view`; None: the launcher whose argument
    shape the command has, else the default one). Values are converted as the receiving parser
    does (vLLM: ``16K`` = 16384; a launcher's ``--set`` value as its YAML 1.1 reads it)."""
    launcher = launcher or of_arguments([str(t) for t in command]) or registry.default()
    return launcher.argv_view(launcher.read([Token(str(t), ("command", i)) for i, t in enumerate(command)]))


def parse_compose(compose_text: str, *, source: str = "docker-compose.yml") -> tuple[dict, dict]:
    """Parse a compose file into ``(compose view, argv view)``, both flattened; the command is
    read by each service's launcher (the service as it will run: :func:`servedeck.compose.
    service.read_services`).

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
    running = {s.name: s for s in read_services(doc.dump())}
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
                launch = running[svc_name].launch if svc_name in running else None
                view = (launch.launcher.argv_view(launch) if launch is not None and launch.launcher is not None
                        else flatten_argv(svc.command or []))
                argv.update({f"{prefix}{k}": v for k, v in view.items()})
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


def flatten_facts(facts: FactsRecord) -> dict[str, Any]:
    """The comparable host and image facts: ``{comparison name: value}`` of the fields
    :class:`~servedeck.runs.records.FactsRecord` marks as compared
    (:func:`~servedeck.runs.records.compared_paths`)."""
    out: dict[str, Any] = {}
    for path, name in compared_paths(FactsRecord).items():
        value: Any = facts
        for part in path:
            value = getattr(value, part)
        out[name] = value
    return out


def arm_views_flat(arm: ArmViews) -> dict[str, dict[str, Any] | None]:
    """Flatten every view of an arm: ``{view: {path: value}}``, None for an absent view."""
    compose, argv = parse_compose(arm.compose_text,
                                  source=str(arm.source / store.COMPOSE) if arm.source else arm.label)
    return {
        "profile": flatten_profile(arm.profile) if arm.profile is not None else None,
        "effective": flatten_effective(arm.effective) if arm.effective is not None else None,
        "compose": compose,
        "argv": argv,
        "facts": flatten_facts(arm.facts) if arm.facts is not None else None,
        "workload": ({k: v for k, v in flatten(arm.workload, "workload").items() if k not in WORKLOAD_SAMPLE_SIZE}
                     if arm.workload is not None else None),
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


def guard(diff: ArmDiff, allow_multi: bool = False, aa: bool = False) -> ArmDiff:
    """Refuse a comparison that is not the experiment asked for.

    Args:
        diff: from :func:`compare_arms`.
        allow_multi: accept several changed variables (the report says MULTI-VARIABLE).
        aa: an A/A comparison: both arms must be the same configuration (nothing differs).

    Returns the diff unchanged when exactly one variable differs (or, with ``aa``, none).

    Raises:
        ServedeckError: nothing differs without ``aa``; something differs with ``aa``; several
            variables differ without ``allow_multi``. The message lists every difference with
            its views.
    """
    lines = "; ".join(f"{v.describe()} [{', '.join(v.views())}]" for v in diff.differences)
    if aa:
        if not diff.is_identical:
            raise ServedeckError(
                f"an A/A comparison needs two runs of the same configuration, but {diff.arm_a} and "
                f"{diff.arm_b} differ in {len(diff.differences)} variable(s): {lines}",
                hint="deploy the same profile twice on the same host and image, then compare those runs")
        return diff
    if diff.is_identical:
        raise ServedeckError(
            f"{diff.arm_a} and {diff.arm_b} do not differ in anything that can change a result "
            f"(compared: {', '.join(diff.compared)})",
            hint="change exactly one variable in the profile, or pass --aa to measure the noise floor "
                 "of two runs of the same configuration")
    if len(diff.differences) > 1 and not allow_multi:
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
