"""Deploy steps for the KV-capacity prediction and the card's power cap.

Small entry points the deploy phases call (``servedeck/deploy/apply.py``), each one line there:

* :func:`preflight_kv_power` — after the host preflight, before anything changes: predicts the
  KV pool (model ``config.json`` read on the host, calibration from this project's runs on the
  same host and image) and reads/judges the power limit. Any error stops the deploy with
  nothing changed.
* :func:`recheck_kv` — after the pull, when the catalog did not know the image at preflight.
* :func:`apply_power` — after the old container stopped, before the new one starts.
* :func:`record_kv` — after the startup log was parsed: ``kv.json`` in the run record.
* :func:`restore_power` — rollback (and a failed deploy's rollback), down.
* :func:`power_status` — ``invoke status``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servedeck.errors import DeployError, ServedeckError
from servedeck.findings import Finding, Severity
from servedeck.host.power import (POWER_STATE, PowerLimit, apply_power_cap, keep_power_cap, power_preflight,
                                  read_power_limit, read_power_state, restore_previous_power_cap)
from servedeck.host.remote import RemoteHost
from servedeck.runs import kv_history
from servedeck.runs.store import RunRecord, utcnow
from servedeck.vllm.kv import CalibrationPoint, ModelShape, judge_kv, model_shape_from_config


@dataclass
class KvPowerPlan:
    """What the preflight found: the KV prediction (dict) and findings; the power limit read
    on the host and the cap to apply (None: the profile sets none)."""

    prediction: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    power: PowerLimit | None = None
    power_cap_w: float | None = None
    sysfs_root: str = "/sys"
    shape: ModelShape | None = None
    history: list = field(default_factory=list)
    change_threshold_pct: float = 10.0
    facts_known: bool = False


def preflight_reads(profile) -> list[str]:
    """Host files this stage reads (relative to the workdir), to be fetched in the preflight
    round trip (``RemoteHost.preflight(read=...)``): the model's ``config.json`` and the power
    state."""
    reads = [POWER_STATE]
    if profile.model.weights_dir:
        reads.append(_config_path(profile.model.weights_dir))
    return reads


def _config_path(weights_dir: str) -> str:
    return f"{weights_dir.rstrip('/')}/config.json"


def read_model_shape(host: RemoteHost, weights_dir: str) -> tuple[ModelShape | None, str | None]:
    """The model's shape from ``<weights_dir>/config.json`` on the host (relative to the
    workdir); ``(None, reason)`` when it is missing or unreadable."""
    path = _config_path(weights_dir)
    data = host.read_file(path, missing_ok=True)
    if data is None:
        return None, f"{host.abspath(path)} does not exist"
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return model_shape_from_config(doc, source=f"{host.name}:{host.abspath(path)}"), None
    except ValueError as exc:
        return None, f"{host.abspath(path)}: {exc}"


def calibration(project, host: RemoteHost, profile) -> list[CalibrationPoint]:
    """The KV calibration of ``profile``'s image on ``host``: the project's recorded runs
    (:func:`servedeck.runs.kv_history.kv_history`); local files only, so a deploy reads them
    while its preflight round trip runs."""
    return kv_history.kv_history(project.runs_dir, host=host.name, image_digest=profile.image_ref.digest)


def preflight_kv_power(project, host: RemoteHost, entry, profile, service, *,
                       change_threshold_pct: float = 10.0, reporter=None,
                       history: list[CalibrationPoint] | None = None) -> KvPowerPlan:
    """KV prediction and power-limit checks before a deploy (nothing is changed on the host
    except the power-limit write-back probe, which writes the value already in force).

    Args:
        project: :class:`servedeck.model.project.Project` (its runs are the calibration).
        entry: the inventory entry (``sysfs_root``).
        service: the rendered service (:class:`servedeck.compose.service.Service`): its
            effective settings, environment and image facts (catalog facts, or inferred ones
            when the catalog does not know the digest yet: :func:`recheck_kv` judges again).
        history: :func:`calibration`, when the caller read it already (None: read here).

    Raises:
        DeployError: vLLM would refuse to start (the message carries the prediction), or the
            power cap cannot be applied (missing interface, permission or tool; out of range).
    """
    plan = KvPowerPlan(sysfs_root=getattr(entry, "sysfs_root", "/sys"), change_threshold_pct=change_threshold_pct,
                       facts_known=service.facts is not None and not service.facts.inferred)
    if profile.model.weights_dir:
        plan.shape, why = read_model_shape(host, profile.model.weights_dir)
    else:  # a Hugging Face repo id: the config is in the cache, not at a known host path
        plan.shape, why = None, "the model is a Hugging Face repo id (no local config.json to read)"
    plan.history = calibration(project, host, profile) if history is None else history
    problems = _judge(plan, profile, service, reporter)
    if plan.shape is None and why:
        plan.findings.append(Finding(severity=Severity.info, rule="kv/no-model-config",
                                     path="model.weights_dir", message=f"no model shape: {why}"))
    plan.power_cap_w = profile.host.power_cap_w
    if plan.power_cap_w is not None:
        plan.power, power_problems = power_preflight(host, plan.power_cap_w, sysfs_root=plan.sysfs_root,
                                                     gpu=profile.launcher.gpu or 0)
        problems += power_problems
    if problems:
        raise DeployError(f"preflight on host {host.name} failed; nothing was changed:\n  - "
                          + "\n  - ".join(problems))
    return plan


def _judge(plan: KvPowerPlan, profile, service, reporter) -> list[str]:
    try:
        settings = service.kv_settings(profile.container.device)
    except ValueError as exc:
        plan.findings = [Finding(severity=Severity.error, rule="kv/bad-setting", path="launcher_env",
                                 message=str(exc))]
        return [f"kv/bad-setting: {exc}"]
    pred, plan.findings = judge_kv(settings, plan.shape, plan.history,
                                   change_threshold_pct=plan.change_threshold_pct)
    plan.prediction = pred.to_dict() if pred else None
    if reporter is not None:
        for f in plan.findings:
            if f.severity is Severity.warning:
                reporter.warn(f"{f.rule}: {f.message}")
            elif f.rule == "kv/prediction":
                reporter.info(f.message.splitlines()[0])
    return [f"{f.rule}: {f.message}" for f in plan.findings if f.severity is Severity.error]


def recheck_kv(plan: KvPowerPlan | None, profile, service, reporter=None) -> None:
    """Judge the KV pool again with the service rendered once the pulled image's facts are known
    (its model.yaml defaults and environment, e.g. ``VLLM_CPU_KVCACHE_SPACE``), when the
    preflight ran without them (an image the catalog did not know yet). Call before the upload.

    Raises:
        DeployError: vLLM would refuse to start; the running deployment was not touched.
    """
    if plan is None or plan.facts_known or service.facts is None:
        return
    plan.facts_known = True
    problems = _judge(plan, profile, service, reporter)
    if problems:
        raise DeployError("with the pulled image's facts, the KV check fails; the running "
                          "deployment was not touched:\n  - " + "\n  - ".join(problems))


def apply_power(host: RemoteHost, plan: KvPowerPlan | None, run: RunRecord | None, profile_name: str,
                reporter=None) -> dict[str, Any] | None:
    """Set the profile's cap (when it has one) and record ``power`` in ``run.json``. A profile
    without a cap keeps the one in force (:func:`servedeck.host.power.keep_power_cap`).

    Returns:
        the change (previous and new watts) or None when the profile sets no cap.

    Raises:
        DeployError: the write failed (the previous value was written back).
    """
    if plan is None:
        return None
    if plan.power_cap_w is None or plan.power is None:
        keep_power_cap(host, profile=profile_name, now=utcnow())
        return None
    try:
        change = apply_power_cap(host, plan.power, plan.power_cap_w, profile=profile_name, now=utcnow(),
                                 sysfs_root=plan.sysfs_root)
    except ServedeckError as exc:
        raise DeployError(f"{exc.message}; the old deployment is stopped, its compose file is "
                          "kept as the previous one", hint=f"invoke rollback --host {host.name}") from None
    if reporter is not None:
        reporter.phase("power", f"{change['interface']} limit {change['previous_w']:g} W -> {change['new_w']:g} W")
    if run is not None:
        run.save_meta(power=change)
    return change


def record_kv(run: RunRecord | None, plan: KvPowerPlan | None, startup: dict[str, Any] | None) -> None:
    """Write the run's ``kv.json`` (prediction beside the logged pool)."""
    if run is not None and plan is not None:
        kv_history.record_kv(run, plan.prediction, startup)


def restore_power(host: RemoteHost, run: RunRecord | None = None, reporter=None) -> dict[str, Any] | None:
    """Put back the limit the current deployment replaced (see
    :func:`servedeck.host.power.restore_previous_power_cap`); recorded as ``power_restored``
    in ``run`` when given.

    Raises:
        ServedeckError: the limit cannot be written.
    """
    change = restore_previous_power_cap(host, now=utcnow())
    if change and reporter is not None:
        reporter.phase("power", f"restored {change['interface']} limit {change['previous_w']:g} W -> "
                                f"{change['new_w']:g} W")
    if change and run is not None:
        run.save_meta(power_restored=change)
    return change


def power_status(host: RemoteHost, sysfs_root: str = "/sys") -> dict[str, Any] | None:
    """``{"current_w", "max_w", "interface", "device", "set_by": state|None}`` or None when the
    host has no power-limit interface and no recorded change."""
    state = read_power_state(host)
    root = (state or {}).get("sysfs_root") or sysfs_root
    try:
        limit = read_power_limit(host, sysfs_root=root, probe=False)
    except ServedeckError:
        limit = None
    if limit is None and state is None:
        return None
    return {"current_w": limit.current_w if limit else None, "max_w": limit.max_w if limit else None,
            "interface": limit.interface if limit else (state or {}).get("interface"),
            "device": limit.device if limit else (state or {}).get("device"), "set_by": state}


def format_power_status(p: dict[str, Any] | None) -> str | None:
    """One status line, e.g. ``power limit 230 W (xe-hwmon, max 300 W); set by deploy of
    speed, previous 275 W``."""
    if not p:
        return None
    text = f"power limit {p['current_w']:g} W" if p.get("current_w") is not None else "power limit unknown"
    text += f" ({p['interface']}" + (f", max {p['max_w']:g} W)" if p.get("max_w") is not None else ")")
    s = p.get("set_by")
    if s:
        text += f"; set by {s.get('profile')} at {s.get('time')}, previous {s.get('previous_w')} W"
    return text
