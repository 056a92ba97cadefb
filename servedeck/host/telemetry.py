"""Energy, power, clocks and throttling on the card host, sampled during a benchmark.

Facts in pyinfra's sense: each is a command and its parser. :func:`start_telemetry` runs one
POSIX ``sh`` script in servedeck's SSH session (:data:`START_SCRIPT`, parsed by
:func:`parse_start`) that finds what the host exposes, starts a **sampler** in the background on
the host and returns once it has written its first reading; :func:`stop_telemetry` stops it, takes
one last reading itself and reads every sample back in one more round trip (:data:`STOP_SCRIPT`,
:func:`parse_samples`). The host's clock is read on the bench's side of those readings (after the
first, before the last): a window of the bench, placed on the host's clock, then lies
inside the readings up to the offset's uncertainty, which :meth:`EnergySeries.between
<servedeck.bench.energy.EnergySeries.between>` allows for. Nothing happens per request: two
round trips per benchmark.

What is read (under the inventory's ``sysfs_root``, a stand-in tree in tests):

* **Intel xe** (``class/drm/card*/device/hwmon/hwmon*`` whose ``name`` is ``xe``): the energy
  counter ``energy1_input`` (card; ``energy2_input``, package, when the card has none), µJ,
  per the kernel's ``Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon`` (Linux 6.5+);
  the GT frequency ``device/tile*/gt*/freq0/act_freq`` (MHz, "the actual resolved frequency
  decided by PCODE") and the throttle files ``freq0/throttle/status`` and
  ``freq0/throttle/reason_*`` (0/1) of ``drivers/gpu/drm/xe/xe_gt_freq.c`` and
  ``xe_gt_throttle.c``;
* **RAPL** (``class/powercap/intel-rapl:*`` named ``package-N`` or ``dram``): ``energy_uj`` (µJ)
  and its range ``max_energy_range_uj`` (Linux ``Documentation/power/powercap/powercap.rst``);
  often readable by root only, which is then said;
* **NVIDIA**: ``nvidia-smi -i GPU --query-gpu=timestamp,power.draw,clocks.sm,
  clocks_throttle_reasons.active --format=csv,noheader,nounits -lms MS`` run beside the sampler
  (``TZ=UTC``: its timestamps are read as UTC).

The sampler is :data:`SAMPLER_SH`: under bash it takes ``$EPOCHREALTIME`` and waits with
``read -t`` (no process per sample); under another ``sh`` it runs ``date`` and ``sleep``. It
appends one line per period, ``TIME<TAB>VALUE...`` (epoch seconds of the host's clock, then each
file's first line, empty when unreadable), to ``<workdir>/.servedeck/telemetry/<token>.tsv``, and
ends by itself at a deadline, so a servedeck that died leaves nothing running for long. The stop
script kills only processes whose command line carries the session's token.

The host's clock is compared with this machine's in both round trips (the host's time against
the midpoint of the round trip); the offset with the smaller uncertainty (half its round trip)
is kept.
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.host.remote import RemoteHost

__all__ = ["Column", "TelemetryHandle", "RawTelemetry", "start_telemetry", "stop_telemetry",
           "parse_start", "parse_samples", "parse_nvidia", "TELEMETRY_DIR", "DEFAULT_PERIOD_S"]

TELEMETRY_DIR = ".servedeck/telemetry"
DEFAULT_PERIOD_S = 0.1
#: the sampler ends by itself this long after its expected end (s)
DEADLINE_MARGIN_S = 600.0

SAMPLER_SH = r"""
out=$1; period=$2; until=$3; token=$4; shift 4
T=$(printf '\t')
exec >>"$out" 2>/dev/null </dev/null
echo $$ >"$out.pid"
if [ -n "${BASH_VERSION:-}" ] && [ -n "${EPOCHREALTIME:-}" ]; then
  fifo=$out.fifo; rm -f "$fifo"; mkfifo "$fifo" && exec 9<>"$fifo"; rm -f "$fifo"
  while :; do
    t=$EPOCHREALTIME; line=$t
    for f in "$@"; do v=; IFS= read -r v <"$f"; line=$line$T$v; done
    printf '%s\n' "$line"
    [ "${t%%[.,]*}" -ge "$until" ] && break
    read -r -t "$period" -u 9 _
  done
else
  while :; do
    t=$(date +%s.%N); line=$t
    for f in "$@"; do v=; IFS= read -r v <"$f"; line=$line$T$v; done
    printf '%s\n' "$line"
    [ "${t%%.*}" -ge "$until" ] && break
    sleep "$period"
  done
fi
p=; IFS= read -r p <"$out.nvpid" && grep -q nvidia-smi "/proc/$p/cmdline" && kill "$p"
"""
"""The sampler: ``$1`` output file, ``$2`` period (s), ``$3`` epoch second to stop at, ``$4``
the session token (on its command line, so the stop script recognises it), then the files.
At its deadline it also stops the ``nvidia-smi`` started beside it."""

START_SCRIPT = r"""
root=$1; gpu=$2; period=$3; until=$4; dir=$5; token=$6; sampler=$7; ms=$8
T=$(printf '\t')
mkdir -p "$dir" || { echo "problem${T}cannot create $dir"; echo "clock$T$(date +%s.%N)"; exit 0; }
out=$dir/$token.tsv
set --
for h in "$root"/class/drm/card*/device/hwmon/hwmon*; do
  [ -d "$h" ] || continue
  nm=; IFS= read -r nm 2>/dev/null <"$h/name"; [ "$nm" = xe ] || continue
  dev=${h%/hwmon/*}; card=${dev%/device}; card=${card##*/}
  found=
  for e in energy1_input energy2_input; do
    [ -e "$h/$e" ] || continue
    v=
    if IFS= read -r v 2>/dev/null <"$h/$e" && [ -n "$v" ]; then
      what=card; [ "$e" = energy2_input ] && what=package
      echo "col${T}energy_uj${T}xe $card $what${T}$h/$e${T}"; set -- "$@" "$h/$e"; found=1; break
    fi
    echo "problem${T}$h/$e exists but cannot be read by $(id -un)"
  done
  [ -n "$found" ] || echo "problem${T}xe $card: no readable energy counter (energy1_input, energy2_input) under $h"
  fr=
  for g in "$dev"/tile*/gt*/freq0; do [ -e "$g/act_freq" ] && { fr=$g; break; }; done
  if [ -n "$fr" ]; then
    echo "col${T}freq_mhz${T}xe $card act_freq${T}$fr/act_freq${T}"; set -- "$@" "$fr/act_freq"
    if [ -e "$fr/throttle/status" ]; then
      echo "col${T}throttle${T}xe $card status${T}$fr/throttle/status${T}"; set -- "$@" "$fr/throttle/status"
      for r in "$fr"/throttle/reason_*; do
        [ -e "$r" ] || continue
        echo "col${T}reason${T}${r##*/reason_}${T}$r${T}"; set -- "$@" "$r"
      done
    else
      echo "problem${T}xe $card: no throttle status ($fr/throttle/status)"
    fi
  else
    echo "problem${T}xe $card: no GPU frequency (device/tile*/gt*/freq0/act_freq)"
  fi
done
for z in "$root"/class/powercap/intel-rapl:*; do
  [ -e "$z/energy_uj" ] || continue
  nm=; IFS= read -r nm 2>/dev/null <"$z/name"
  case $nm in package-*|dram) ;; *) continue ;; esac
  v=
  if IFS= read -r v 2>/dev/null <"$z/energy_uj" && [ -n "$v" ]; then
    r=; IFS= read -r r 2>/dev/null <"$z/max_energy_range_uj"
    echo "col${T}energy_uj${T}rapl $nm${T}$z/energy_uj${T}$r"; set -- "$@" "$z/energy_uj"
  else
    echo "problem${T}$z/energy_uj (RAPL $nm) cannot be read by $(id -un) (RAPL counters are often root-only)"
  fi
done
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_name$T$(nvidia-smi -i "$gpu" --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  TZ=UTC nohup nvidia-smi -i "$gpu" --query-gpu=timestamp,power.draw,clocks.sm,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms "$ms" >"$out.nv" 2>&1 </dev/null &
  echo $! >"$out.nvpid"
  echo "nvidia$T$!"
fi
[ "$#" -gt 0 ] && printf '%s\n' "$@" >"$out.files"  # the stop script's last reading reads them too
sh_=sh; command -v bash >/dev/null 2>&1 && sh_=bash
if command -v setsid >/dev/null 2>&1; then
  setsid "$sh_" -c "$sampler" "sd-telemetry-$token" "$out" "$period" "$until" "$token" "$@" </dev/null >/dev/null 2>&1 &
else
  nohup "$sh_" -c "$sampler" "sd-telemetry-$token" "$out" "$period" "$until" "$token" "$@" </dev/null >/dev/null 2>&1 &
fi
# return once the first reading is written (at most 2 s): a window that opens right after the
# start (a bench's warm-up request, a load's first level) must lie inside the readings
i=0; while [ ! -s "$out" ] && [ "$i" -lt 200 ]; do sleep 0.01; i=$((i+1)); done
# the host's clock after that reading: a window opening after this script has returned maps (by
# the offset of this round trip) to a host time after the first reading
echo "clock$T$(date +%s.%N)"
echo "sampler$T$sh_"
echo "file$T$out"
"""
"""``$1`` sysfs root, ``$2`` GPU index (nvidia-smi), ``$3`` period (s), ``$4`` epoch second the
sampler stops at, ``$5`` the telemetry directory, ``$6`` token, ``$7`` :data:`SAMPLER_SH`, ``$8``
nvidia-smi's period (ms). Prints ``KEY<TAB>FIELDS`` lines (:func:`parse_start`)."""

STOP_SCRIPT = r"""
out=$1; token=$2
T=$(printf '\t')
echo "clock$T$(date +%s.%N)"
p=; IFS= read -r p 2>/dev/null <"$out.pid"
if [ -n "$p" ] && grep -q "sd-telemetry-$token" "/proc/$p/cmdline" 2>/dev/null; then
  kill "$p" 2>/dev/null
  # until it has ended (a zombie nobody reaps yet has an empty command line), at most 1 s
  i=0; while grep -q "sd-telemetry-$token" "/proc/$p/cmdline" 2>/dev/null && [ "$i" -lt 100 ]; do
    sleep 0.01; i=$((i+1))
  done
fi
p=; IFS= read -r p 2>/dev/null <"$out.nvpid"
if [ -n "$p" ] && grep -q nvidia-smi "/proc/$p/cmdline" 2>/dev/null; then kill "$p" 2>/dev/null; fi
# a last reading of the sampler's files, taken after the clock above: the last window, which
# ended before this script began, ends inside the readings (no wait for the sampler's next one)
if [ -s "$out" ] && [ -s "$out.files" ]; then
  line=$(date +%s.%N)
  while IFS= read -r f; do v=; IFS= read -r v 2>/dev/null <"$f"; line=$line$T$v; done <"$out.files"
  printf '%s\n' "$line" >>"$out"
fi
echo "==samples"
cat "$out" 2>/dev/null
echo "==nvidia"
cat "$out.nv" 2>/dev/null
rm -f "$out" "$out.pid" "$out.nv" "$out.nvpid" "$out.files"
"""
"""``$1`` the sample file, ``$2`` token: prints the host's clock, stops the sampler (and
nvidia-smi), appends one last reading of the sampler's files (listed in ``$1.files``), prints
``==samples`` and the samples, ``==nvidia`` and nvidia-smi's lines, removes the files."""


@dataclass(frozen=True)
class Column:
    """One sampled file.

    Attributes:
        kind: ``energy_uj`` | ``freq_mhz`` | ``throttle`` | ``reason``.
        source: ``xe card1 card``, ``rapl package-0``, ``xe card1 act_freq``; for ``reason``
            the reason's name (``pl1``, ``thermal``).
        path: the file on the host.
        range_uj: the counter's range (RAPL ``max_energy_range_uj``), None when not stated.
    """

    kind: str
    source: str
    path: str
    range_uj: int | None = None


@dataclass
class TelemetryHandle:
    """A running sampler: what :func:`start_telemetry` started, for :func:`stop_telemetry`."""

    token: str
    file: str
    columns: list[Column]
    problems: list[str]
    period_s: float
    sysfs_root: str
    sampler: str | None = None
    nvidia: bool = False
    gpu_name: str | None = None
    clock_offset_s: float = 0.0
    clock_uncertainty_s: float = 0.0
    started_at: str = ""


@dataclass
class RawTelemetry:
    """Every sample read back (times on the host's clock, s).

    Attributes:
        columns: what each value column is.
        t: sample times; values: one list per column (int/float, None when unreadable).
        nvidia: ``(t, power_w, sm_mhz, reasons bitmask)`` per nvidia-smi line.
        problems: what could not be read, in words.
        clock_offset_s: host clock minus this machine's clock; clock_uncertainty_s: its bound.
    """

    columns: list[Column]
    t: list[float] = field(default_factory=list)
    values: list[list[float | None]] = field(default_factory=list)
    nvidia: list[tuple[float, float | None, float | None, int | None]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    clock_offset_s: float = 0.0
    clock_uncertainty_s: float = 0.0
    period_s: float = DEFAULT_PERIOD_S
    sampler: str | None = None
    sysfs_root: str = "/sys"
    started_at: str = ""
    gpu_name: str | None = None

    def column_values(self, kind: str) -> list[tuple[Column, list[float | None]]]:
        """The columns of one kind with their values."""
        return [(c, v) for c, v in zip(self.columns, self.values) if c.kind == kind]


def _epoch(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", "."))
    except ValueError:
        return None


def parse_start(text: str) -> tuple[float | None, list[Column], list[str], dict[str, str]]:
    """The start script's lines → ``(host clock, columns, problems, other records)``; other
    records: ``file``, ``sampler``, ``nvidia`` (pid), ``gpu_name`` (nvidia-smi's name of the GPU).

    Raises:
        ServedeckError: a line that is not the script's.
    """
    clock = None
    cols: list[Column] = []
    problems: list[str] = []
    other: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if key == "clock":
            clock = _epoch(rest)
        elif key == "col" and len(fields) == 4:
            rng = fields[3].strip()
            cols.append(Column(fields[0], fields[1], fields[2], int(rng) if rng.isdigit() else None))
        elif key == "problem":
            problems.append(rest)
        elif key in ("file", "sampler", "nvidia", "gpu_name"):
            other[key] = rest
        else:
            raise ServedeckError(f"the telemetry start script printed an unexpected line: {line[:200]!r}")
    return clock, cols, problems, other


def _number(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def parse_samples(text: str, columns: list[Column]) -> tuple[list[float], list[list[float | None]], int]:
    """Sampler lines (``TIME<TAB>VALUE...``) → ``(times, one value list per column, lines
    dropped)``. A line with another number of fields (cut by the stop) is dropped and counted;
    an empty or non-numeric value is None."""
    t: list[float] = []
    values: list[list[float | None]] = [[] for _ in columns]
    dropped = 0
    for line in text.splitlines():
        if not line:
            continue
        parts = line.split("\t")
        ts = _epoch(parts[0])
        if ts is None or len(parts) != len(columns) + 1:
            dropped += 1
            continue
        t.append(ts)
        for i, v in enumerate(parts[1:]):
            values[i].append(_number(v))
    return t, values, dropped


def parse_nvidia(text: str) -> tuple[list[tuple[float, float | None, float | None, int | None]], list[str]]:
    """``nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks_throttle_reasons.active
    --format=csv,noheader,nounits`` lines (timestamps ``2026/10/17 01:50:12.345``, UTC) →
    ``[(t, W, MHz, bitmask)]`` and the lines that were not samples (errors)."""
    out = []
    other = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            if line.strip():
                other.append(line.strip())
            continue
        try:
            ts = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(
                tzinfo=_dt.timezone.utc).timestamp()
        except ValueError:
            other.append(line.strip())
            continue
        mask = None
        try:
            mask = int(parts[3], 16)
        except ValueError:
            pass
        power, sm = _number(parts[1]), _number(parts[2])
        out.append((ts, None if power is None else float(power), None if sm is None else float(sm), mask))
    return out, other


def start_telemetry(host: RemoteHost, *, sysfs_root: str = "/sys", gpu: int = 0,
                    period_s: float = DEFAULT_PERIOD_S, max_duration_s: float = 4 * 3600.0) -> TelemetryHandle:
    """Find the host's counters and start the sampler (one round trip; returns once the sampler
    has written its first reading, at most 2 s later).

    Args:
        sysfs_root: where sysfs is (the inventory's ``sysfs_root``).
        gpu: the device index for ``nvidia-smi``.
        period_s: seconds between samples.
        max_duration_s: the sampler stops by itself this long after it started (plus
            :data:`DEADLINE_MARGIN_S`), should nobody stop it.

    Raises:
        ServedeckError: the host is unreachable, or a bad argument.
    """
    if not 0.01 <= period_s <= 60:
        raise ServedeckError(f"telemetry period {period_s:g} s is outside 0.01-60 s", field="telemetry_period_s")
    token = uuid.uuid4().hex[:16]
    t0 = time.time()
    until = int(t0 + max_duration_s + DEADLINE_MARGIN_S)
    res = host.run_script(START_SCRIPT, [sysfs_root, str(gpu), f"{period_s:g}", str(until),
                                         host.abspath(TELEMETRY_DIR), token, SAMPLER_SH,
                                         str(max(20, int(period_s * 1000)))], timeout=60)
    t1 = time.time()
    clock, cols, problems, other = parse_start(res.stdout)
    handle = TelemetryHandle(token=token, file=other.get("file", ""), columns=cols, problems=problems,
                             period_s=period_s, sysfs_root=sysfs_root, sampler=other.get("sampler"),
                             nvidia="nvidia" in other, gpu_name=other.get("gpu_name") or None,
                             started_at=_dt.datetime.fromtimestamp(t0, _dt.timezone.utc)
                             .replace(microsecond=0).isoformat().replace("+00:00", "Z"))
    if clock is not None:
        handle.clock_offset_s = clock - (t0 + t1) / 2
        handle.clock_uncertainty_s = (t1 - t0) / 2
    return handle


def stop_telemetry(host: RemoteHost, handle: TelemetryHandle) -> RawTelemetry:
    """Stop the sampler and read every sample back (one round trip); remove its files.

    Raises:
        ServedeckError: the host is unreachable.
    """
    raw = RawTelemetry(columns=list(handle.columns), problems=list(handle.problems),
                       clock_offset_s=handle.clock_offset_s, clock_uncertainty_s=handle.clock_uncertainty_s,
                       period_s=handle.period_s, sampler=handle.sampler, sysfs_root=handle.sysfs_root,
                       started_at=handle.started_at, gpu_name=handle.gpu_name)
    if not handle.file:
        return raw
    t0 = time.time()
    res = host.run_script(STOP_SCRIPT, [handle.file, handle.token], timeout=120, check=False)
    t1 = time.time()
    head, _, rest = res.stdout.partition("==samples\n")
    samples, _, nv = rest.partition("==nvidia\n")
    for line in head.splitlines():
        if line.startswith("clock\t"):
            clock = _epoch(line.split("\t", 1)[1])
            if clock is not None and (t1 - t0) / 2 < raw.clock_uncertainty_s:
                raw.clock_offset_s = clock - (t0 + t1) / 2
                raw.clock_uncertainty_s = (t1 - t0) / 2
    raw.t, raw.values, dropped = parse_samples(samples, raw.columns)
    if dropped:
        raw.problems.append(f"{dropped} sampler line(s) were cut or malformed and were dropped")
    if handle.nvidia:
        raw.nvidia, errors = parse_nvidia(nv)
        if errors:
            raw.problems.append(f"nvidia-smi: {errors[0][:200]}")
    if not raw.t and raw.columns:
        raw.problems.append("the sampler wrote no samples")
    return raw


def telemetry_document(raw: RawTelemetry) -> dict[str, Any]:
    """The raw part of a run's ``telemetry.json``: sources, problems, clock and the samples
    (times relative to the first sample, to keep the file small; ``t0`` is the first's epoch)."""
    t0 = raw.t[0] if raw.t else None
    return {
        "sysfs_root": raw.sysfs_root, "period_s": raw.period_s, "sampler": raw.sampler,
        "started_at": raw.started_at, "gpu_name": raw.gpu_name, "clock_offset_s": raw.clock_offset_s,
        "clock_uncertainty_s": raw.clock_uncertainty_s,
        "columns": [{"kind": c.kind, "source": c.source, "path": c.path, "range_uj": c.range_uj}
                    for c in raw.columns],
        "t0": t0, "t": [round(x - t0, 6) for x in raw.t] if t0 is not None else [],
        "values": raw.values,
        "nvidia": [list(x) for x in raw.nvidia],
    }
