"""The card's power limit on the host: read the allowed range, read, apply and restore.

All host I/O goes through :class:`servedeck.host.remote.RemoteHost` (one SSH round trip per
operation, a POSIX ``sh`` script). Interfaces, first found wins:

* **Intel xe driver (Arc Pro B70)**: the card's hwmon directory
  ``<sysfs_root>/class/drm/card*/device/hwmon/hwmon*`` whose ``name`` is ``xe``. Per the
  kernel's ABI document ``Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon`` (Linux 6.5+):
  ``power1_max`` is the card's sustained (PL1) power limit in microwatts, read-write, "writing
  values > 0 and <= TDP will enable the power limit", 0 means disabled; ``power1_rated_max`` is
  the card's default TDP (read-only). (``power1_cap``, 6.15+, is the *burst* PL2 limit: not the
  cap set here.) A ``power1_rated_min`` (generic hwmon ABI, ``Documentation/hwmon/
  sysfs-interface.rst``) is honoured when present, else the lower bound is > 0 W.
  Writing: the sysfs file itself when the SSH user may write it; else ``xpu-smi config
  --device N --powerlimit W --powertype sustain`` (Intel XPU Manager 2.x ``xpu-smi config``)
  when installed; the value is read back from sysfs either way.
* **NVIDIA**: ``nvidia-smi -i N --query-gpu=power.limit,power.min_limit,power.max_limit,
  power.default_limit --format=csv,noheader,nounits`` (watts) and ``nvidia-smi -i N -pl W``
  (needs root: run directly as root or through ``sudo -n``).

Whether a limit can be written is *probed* in preflight by writing the current value back (a
no-op for the card), so a missing permission is found before anything changes.

Where a deploy recorded the limit it replaced, the host keeps ``.servedeck/power.json`` under
the workdir (written atomically): ``{"interface", "device", "applied_w", "previous_w",
"profile", "time"}``. :func:`restore_previous_power_cap` (rollback, down) puts
``previous_w`` back and swaps the two, as the compose file and its ``.prev`` are swapped.

Tests run against a *stand-in* sysfs tree (a directory on the loopback host, set per host
with the inventory's ``sysfs_root``): no Intel GPU exists on the test machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.host.facts import XE_HWMON_SH, microwatts_to_w, xe_hwmon_record
from servedeck.host.remote import RemoteHost

__all__ = ["PowerLimit", "read_power_limit", "check_power_cap", "power_preflight",
           "apply_power_cap", "read_power_state", "restore_previous_power_cap", "keep_power_cap",
           "POWER_STATE", "DEFAULT_SYSFS_ROOT"]

POWER_STATE = ".servedeck/power.json"
DEFAULT_SYSFS_ROOT = "/sys"
_TOLERANCE_W = 1.0  # the driver rounds to its power unit (xe: 1/8 W steps); 1 W is plenty

_READ_SCRIPT = XE_HWMON_SH + r"""
root=$1; idx=$2; probe=$3
sd_xe_hwmon xe "$root" "$probe"
command -v xpu-smi >/dev/null 2>&1 && printf 'tool\txpu-smi\n'
if [ "$(id -u)" = 0 ]; then printf 'root\t1\n'; elif sudo -n true 2>/dev/null; then printf 'sudo\t1\n'; fi
if command -v nvidia-smi >/dev/null 2>&1; then
  printf 'tool\tnvidia-smi\n'
  nvidia-smi -i "$idx" --query-gpu=power.limit,power.min_limit,power.max_limit,power.default_limit \
    --format=csv,noheader,nounits 2>&1 | head -1 | sed 's/^/nvidia\t/'
fi
exit 0
"""

_APPLY_SCRIPT = r"""
set -u
kind=$1; dev=$2; writer=$3; uw=$4; w=$5; idx=$6
case $writer in
  sysfs) printf '%s' "$uw" > "$dev/power1_max" || exit 7 ;;
  sudo-sysfs) printf '%s' "$uw" | sudo -n tee "$dev/power1_max" >/dev/null || exit 7 ;;
  xpu-smi) xpu-smi config --device "$idx" --powerlimit "$w" --powertype sustain >&2 || exit 7 ;;
  nvidia-smi) nvidia-smi -i "$idx" -pl "$w" >&2 || exit 7 ;;
  sudo-nvidia-smi) sudo -n nvidia-smi -i "$idx" -pl "$w" >&2 || exit 7 ;;
  *) echo "unknown writer $writer" >&2; exit 8 ;;
esac
case $kind in
  xe-hwmon) cat "$dev/power1_max" ;;
  nvidia-smi) nvidia-smi -i "$idx" --query-gpu=power.limit --format=csv,noheader,nounits | head -1 ;;
esac
"""


@dataclass
class PowerLimit:
    """The card's power limit as the host reports it (watts).

    Attributes:
        interface: ``xe-hwmon`` | ``nvidia-smi``.
        device: the hwmon directory (xe) or the GPU index (NVIDIA), as text.
        current_w: the limit in force (0 = disabled, xe), None when unreadable.
        min_w / max_w: the allowed range (xe: ``power1_rated_min`` or None / ``power1_rated_max``;
            NVIDIA: ``power.min_limit`` / ``power.max_limit``).
        default_w: the default limit (xe: ``power1_rated_max``; NVIDIA: ``power.default_limit``).
        writer: how it would be written (``sysfs``, ``sudo-sysfs``, ``xpu-smi``, ``nvidia-smi``,
            ``sudo-nvidia-smi``), None when it cannot be.
        problem: why it cannot be written, or None.
        gpu: the device index used for the tools.
    """

    interface: str
    device: str
    current_w: float | None
    min_w: float | None
    max_w: float | None
    default_w: float | None
    writer: str | None
    problem: str | None
    gpu: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _w(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_power_report(text: str, *, gpu: int = 0, sysfs_root: str = DEFAULT_SYSFS_ROOT) -> PowerLimit | None:
    """Parse the read script's tab-separated lines into a :class:`PowerLimit` (None: no
    interface). Pure; exposed for tests.

    Raises:
        ServedeckError: several xe cards (which one to cap is ambiguous).
    """
    xe, tools, nvidia, priv = [], set(), None, None
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "xe" and len(parts) == 6:
            xe.append(parts[1:])
        elif parts[0] == "tool" and len(parts) == 2:
            tools.add(parts[1])
        elif parts[0] == "nvidia" and len(parts) == 2:
            nvidia = parts[1]
        elif parts[0] in ("root", "sudo"):
            priv = parts[0]
    if len(xe) > 1:
        raise ServedeckError(f"{len(xe)} xe cards under {sysfs_root}/class/drm ({', '.join(x[0] for x in xe)}): "
                             "servedeck caps single-card hosts only",
                             hint="set the limit by hand, or remove host.power_cap_w from the profile")
    if xe:
        rec = xe_hwmon_record(xe[0])
        path, cur = rec["path"], rec["current_w"]
        writer, problem = None, None
        if rec["writable"]:
            writer = "sysfs"
        elif "xpu-smi" in tools:
            writer = "xpu-smi"
        elif priv == "sudo":
            writer = "sudo-sysfs"
        else:
            problem = (f"{path}/power1_max cannot be written by the SSH user and neither xpu-smi "
                       "nor passwordless sudo is available")
        if cur is None:
            writer, problem = None, f"{path}/power1_max is not readable ({xe[0][1]!r})"
        return PowerLimit("xe-hwmon", path, cur, rec["rated_min_w"], rec["rated_max_w"],
                          rec["rated_max_w"], writer, problem, gpu)
    if nvidia is not None:
        vals = [_w(v) for v in nvidia.split(",")]
        if len(vals) != 4 or vals[0] is None:
            return PowerLimit("nvidia-smi", str(gpu), None, None, None, None, None,
                              f"nvidia-smi cannot read the power limit of GPU {gpu}: {nvidia.strip()}", gpu)
        writer = {"root": "nvidia-smi", "sudo": "sudo-nvidia-smi"}.get(priv or "")
        problem = None if writer else "nvidia-smi -pl needs root (or passwordless sudo) on the host"
        return PowerLimit("nvidia-smi", str(gpu), vals[0], vals[1], vals[2], vals[3], writer, problem, gpu)
    return None


def read_power_limit(host: RemoteHost, *, sysfs_root: str = DEFAULT_SYSFS_ROOT, gpu: int = 0,
                     probe: bool = True) -> PowerLimit | None:
    """The card's power limit and how it could be written, in one SSH round trip.

    Args:
        sysfs_root: where sysfs is mounted on the host (a stand-in tree in tests).
        gpu: device index for ``xpu-smi`` / ``nvidia-smi``.
        probe: find out whether the xe limit is writable by writing its current value back.

    Returns:
        None when the host has no interface servedeck knows (no xe hwmon, no nvidia-smi).

    Raises:
        ServedeckError: the host is unreachable; several xe cards.
    """
    res = host.run_script(_READ_SCRIPT, [sysfs_root, str(gpu), "1" if probe else "0"], timeout=60)
    return parse_power_report(res.stdout, gpu=gpu, sysfs_root=sysfs_root)


def check_power_cap(limit: PowerLimit | None, watts: float, *, sysfs_root: str = DEFAULT_SYSFS_ROOT
                    ) -> list[str]:
    """Problems that stop a cap of ``watts`` before anything changes (empty: it can be set).

    Pure: missing interface, missing permission or tool, out of the card's allowed range.
    """
    if limit is None:
        return [f"host.power_cap_w is {watts:g} W but the host has no power-limit interface "
                f"servedeck knows (no xe hwmon under {sysfs_root}/class/drm, no nvidia-smi)"]
    out = []
    if limit.problem:
        out.append(f"host.power_cap_w {watts:g} W cannot be applied: {limit.problem}")
    low = limit.min_w if limit.min_w is not None else 0.0
    if watts <= 0 or watts < low or (limit.max_w is not None and watts > limit.max_w):
        if limit.max_w is None:
            rng = f"at least {limit.min_w:g} W" if limit.min_w is not None else "above 0 W"
        elif limit.min_w is not None:
            rng = f"{limit.min_w:g}–{limit.max_w:g} W"
        else:
            rng = f"up to {limit.max_w:g} W"
        out.append(f"host.power_cap_w {watts:g} W is outside the card's allowed range {rng} "
                   f"({limit.interface} {limit.device})")
    return out


def power_preflight(host: RemoteHost, watts: float | None, *, sysfs_root: str = DEFAULT_SYSFS_ROOT,
                    gpu: int = 0) -> tuple[PowerLimit | None, list[str]]:
    """Read the limit (probing writability) and judge a wanted cap; ``watts`` None: read only.

    Returns:
        ``(limit or None, problems)``; problems empty when the cap can be applied.
    """
    limit = read_power_limit(host, sysfs_root=sysfs_root, gpu=gpu, probe=watts is not None)
    if watts is None:
        return limit, []
    return limit, check_power_cap(limit, watts, sysfs_root=sysfs_root)


def _write(host: RemoteHost, limit: PowerLimit, watts: float) -> float:
    if limit.writer is None:
        raise ServedeckError(f"host {host.name}: the power limit cannot be written: {limit.problem}")
    res = host.run_script(_APPLY_SCRIPT, [limit.interface, limit.device, limit.writer,
                                          str(int(round(watts * 1e6))), f"{watts:g}", str(limit.gpu)],
                          check=False, timeout=60)
    got = microwatts_to_w(res.stdout) if limit.interface == "xe-hwmon" else _w(res.stdout)
    if res.returncode != 0 or got is None:
        raise ServedeckError(f"host {host.name}: setting the power limit to {watts:g} W with "
                             f"{limit.writer} failed: {res.stderr.strip()[-300:] or res.stdout.strip()}")
    if abs(got - watts) > _TOLERANCE_W and not (watts == 0 and got == 0):
        raise ServedeckError(f"host {host.name}: wrote {watts:g} W to {limit.device} but it reads "
                             f"back {got:g} W")
    return got


def apply_power_cap(host: RemoteHost, limit: PowerLimit, watts: float, *, profile: str,
                    now: str, sysfs_root: str = DEFAULT_SYSFS_ROOT) -> dict[str, Any]:
    """Set the cap and keep the replaced value in the host's ``.servedeck/power.json``.

    Returns:
        the change recorded in the run: ``{"interface", "device", "writer", "previous_w",
        "new_w", "time"}`` (``new_w`` as read back).

    Raises:
        ServedeckError: the write failed or reads back another value (the previous value is
            then written back before raising, when it is known).
    """
    previous = limit.current_w
    try:
        new = _write(host, limit, watts)
    except ServedeckError:
        if previous is not None:
            try:
                _write(host, limit, previous)
            except ServedeckError:
                pass
        raise
    state = {"interface": limit.interface, "device": limit.device, "gpu": limit.gpu,
             "sysfs_root": sysfs_root,
             "applied_w": new, "previous_w": previous, "profile": profile, "time": now}
    host.upload_atomic(POWER_STATE, (json.dumps(state, indent=2) + "\n").encode())
    return {"interface": limit.interface, "device": limit.device, "writer": limit.writer,
            "previous_w": previous, "new_w": new, "time": now}


def read_power_state(host: RemoteHost) -> dict[str, Any] | None:
    """The host's ``.servedeck/power.json`` (None when no deploy set a cap)."""
    data = host.read_file(POWER_STATE, missing_ok=True)
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        raise ServedeckError(f"host {host.name}: {host.abspath(POWER_STATE)} is not JSON",
                             hint="remove it; the next deploy with host.power_cap_w writes it again") from None
    return doc if isinstance(doc, dict) else None


def restore_previous_power_cap(host: RemoteHost, *, sysfs_root: str | None = None, now: str
                               ) -> dict[str, Any] | None:
    """Put back the limit the current deployment replaced (rollback, down).

    ``sysfs_root`` defaults to the one recorded with the change.

    Nothing happens when no state was recorded or the previous value equals the applied one.

    Returns:
        the change ``{"interface", "device", "writer", "previous_w", "new_w", "time"}`` or None.

    Raises:
        ServedeckError: the limit cannot be written or reads back another value.
    """
    state = read_power_state(host)
    if not state or state.get("previous_w") is None:
        return None
    if state.get("applied_w") == state["previous_w"]:
        return None
    root = sysfs_root or state.get("sysfs_root") or DEFAULT_SYSFS_ROOT
    limit = read_power_limit(host, sysfs_root=root, gpu=int(state.get("gpu") or 0))
    if limit is None or limit.device != state.get("device"):
        raise ServedeckError(f"host {host.name}: the power-limit device recorded in "
                             f"{host.abspath(POWER_STATE)} ({state.get('device')}) is not found now")
    back = apply_power_cap(host, limit, float(state["previous_w"]), now=now, sysfs_root=root,
                           profile=f"(restore of {state.get('profile')})")
    return back


def keep_power_cap(host: RemoteHost, *, profile: str, now: str) -> dict[str, Any] | None:
    """A deployment that sets no cap keeps the one in force: record that in the host's state
    (``previous_w = applied_w``), so a later rollback or down does not undo a cap that the
    deployment it returns to also ran with. No state: nothing to do.

    Returns:
        the rewritten state, or None.
    """
    state = read_power_state(host)
    if not state or state.get("previous_w") == state.get("applied_w"):
        return None
    state = {**state, "previous_w": state.get("applied_w"), "profile": profile, "time": now}
    host.upload_atomic(POWER_STATE, (json.dumps(state, indent=2) + "\n").encode())
    return state
