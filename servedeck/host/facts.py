"""Host facts for a deploy's preflight, gathered by one POSIX ``sh`` script (see
:meth:`servedeck.host.remote.RemoteHost.preflight_facts` for the returned shape).

Sources: ``uname``, ``docker version`` / ``docker compose version``, ``/dev/dri/*`` (stat),
the xe card's sustained power limit (:data:`XE_HWMON_SH`: sysfs hwmon ``power1_max``, microwatts),
``df -Pk`` of the workdir, ``/proc/net/tcp{,6}`` listeners (state ``0A``), the containers
publishing the port, and ``docker image inspect`` of the deploy's image (the Engine API's
``GET /images/{name}/json`` document, the same one the docker SDK's ``Image.attrs`` holds).
"""

from __future__ import annotations

import json
from typing import Any

from servedeck.errors import ServedeckError

COMPOSE_SH = r"""
sd_compose_find() {
  SD_COMPOSE_BIN=
  if ! grep -qs cliPluginsExtraDirs "${DOCKER_CONFIG:-$HOME/.docker}/config.json"; then
    for p in "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins" /usr/local/lib/docker/cli-plugins \
             /usr/local/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
      if [ -x "$p/docker-compose" ]; then SD_COMPOSE_BIN=$p/docker-compose; return 0; fi
    done
  fi
}
sd_compose() {
  sd_compose_find
  if [ -n "$SD_COMPOSE_BIN" ]; then exec "$SD_COMPOSE_BIN" "$@"; fi
  exec docker compose "$@"
}
sd_compose_version() {
  sd_compose_find
  if [ -z "$SD_COMPOSE_BIN" ]; then docker compose version --short; return; fi
  st=$(stat -L -c '%d:%i:%s:%y:%z' "$SD_COMPOSE_BIN" 2>/dev/null) || { "$SD_COMPOSE_BIN" version --short; return; }
  id="$SD_COMPOSE_BIN $st"; c=${XDG_CACHE_HOME:-$HOME/.cache}/servedeck/compose-version
  k=; v=
  { IFS= read -r k; IFS= read -r v; } 2>/dev/null <"$c"
  if [ "$k" = "$id" ] && [ -n "$v" ]; then echo "$v"; return 0; fi
  v=$("$SD_COMPOSE_BIN" version --short) || return
  { mkdir -p "${c%/*}" && t=$(mktemp "$c.XXXXXX") && printf '%s\n%s\n' "$id" "$v" >"$t" && mv -f "$t" "$c"; } 2>/dev/null
  echo "$v"
}
"""  # noqa: E501 - a shell program: its lines are the script's
"""POSIX ``sh`` functions for Compose v2 on a host.

``sd_compose ARGS...`` execs Compose with ``ARGS`` (as ``docker compose ARGS``). It runs the
Compose CLI plugin binary itself when it sits in one of the Docker CLI's plugin directories,
searched in the CLI's own order (docker/cli ``cli-plugins/manager``, Linux:
``~/.docker/cli-plugins`` then the four system directories), the way Compose runs standalone;
``docker compose`` first starts the Docker CLI, which runs the plugin once to read its metadata
and then again to do the work: 0.1-0.2 s of each call on the test machines. Without the plugin
there, or with ``cliPluginsExtraDirs`` in the Docker CLI's config (other places to look first),
it is ``docker compose``.

``sd_compose_version`` prints ``docker compose version --short``. For the plugin binary it keeps
the answer in ``${XDG_CACHE_HOME:-~/.cache}/servedeck/compose-version`` on the host, under the
binary's path and identity (device, inode, size, and mtime and ctime to the nanosecond where
``stat`` gives them: an upgrade or a replaced file changes it), so that a deploy does not start
Compose once more only to ask its version (a Go process start, 0.02-0.05 s of a preflight's
critical path on the test machines). A cache that cannot be written is no cache."""

XE_HWMON_SH = r"""
T=$(printf '\t')
sd_xe_hwmon() {
  for d in "$2"/class/drm/card*/device/hwmon/hwmon*; do
    [ -d "$d" ] || continue
    n=; IFS= read -r n 2>/dev/null <"$d/name"; [ "$n" = xe ] || continue
    c=; x=; m=; w=-
    IFS= read -r c 2>/dev/null <"$d/power1_max"
    IFS= read -r x 2>/dev/null <"$d/power1_rated_max"
    IFS= read -r m 2>/dev/null <"$d/power1_rated_min"
    if [ "$3" = 1 ] && [ -n "$c" ]; then
      if ( printf '%s' "$c" > "$d/power1_max" ) 2>/dev/null; then w=1; else w=0; fi
    fi
    echo "$1$T$d$T$c$T$x$T$m$T$w"
  done
}
"""
"""POSIX ``sh`` function ``sd_xe_hwmon PREFIX ROOT PROBE``: one line per Intel xe card hwmon
directory under ``ROOT/class/drm/card*/device/hwmon/`` (``name`` is ``xe``), ``PREFIX<TAB>DIR
<TAB>power1_max<TAB>power1_rated_max<TAB>power1_rated_min<TAB>W`` (microwatts as the files hold
them, empty when a file is missing; :func:`xe_hwmon_record` reads the fields). ``W`` is ``1`` or
``0`` when ``PROBE`` is ``1`` (whether writing the value in force back to ``power1_max``
succeeded: a no-op for the card), else ``-``. Per the kernel's ABI document
``Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon`` (Linux 6.5+), ``power1_max`` is the
card's sustained (PL1) limit, the one servedeck sets (:mod:`servedeck.host.power`), and
``power1_rated_max`` the card's default TDP; ``power1_cap`` (6.16+) is the burst (PL2) limit and
is not read. The preflight and the power-limit reader both use it: one reading of the card."""


def xe_hwmon_record(fields: list[str]) -> dict[str, Any]:
    """The fields after the prefix of one :data:`XE_HWMON_SH` line → ``{"path": DIR,
    "current_w", "rated_max_w", "rated_min_w": float (W) | None (file missing or not a number),
    "writable": True | False | None (not probed)}``.

    Raises:
        ValueError: not the five fields the function prints.
    """
    if len(fields) != 5:
        raise ValueError(f"an xe hwmon record has 5 fields, not {len(fields)}: {fields!r}")
    path, cur, rated_max, rated_min, probe = fields
    return {"path": path, "current_w": microwatts_to_w(cur), "rated_max_w": microwatts_to_w(rated_max),
            "rated_min_w": microwatts_to_w(rated_min), "writable": {"1": True, "0": False}.get(probe)}


# $1 workdir, $2 port ("" none), $3 image reference ("" none), $4 sysfs root, then the paths to
# check.
# Prints one record per line, "KEY<TAB>FIELDS..." (see parse_facts); every value it prints is one
# line (names, numbers, kinds; the image document with its newlines removed). Apart from the
# Docker CLI calls it forks little: a fork costs ~1 ms on a busy host, and the old JSON printer
# made ~60 of them.
PREFLIGHT_SCRIPT = COMPOSE_SH + XE_HWMON_SH + r"""
wd=$1; port=$2; img=$3; sysfs=${4:-/sys}; shift 4
pft=$(mktemp -d) || { echo "servedeck preflight: mktemp -d failed on the host" >&2; exit 1; }; trap 'rm -rf "$pft"' EXIT
# the Docker CLI calls run side by side (each is a process start and an Engine round trip)
docker version --format '{{.Server.Version}} {{.Server.APIVersion}}' >"$pft/dv" 2>/dev/null &
sd_compose_version >"$pft/cv" 2>/dev/null &
[ -n "$port" ] && docker ps --filter "publish=$port" \
  --format '{{.Names}}|{{.Label "com.docker.compose.project.working_dir"}}' >"$pft/pc" 2>/dev/null &
[ -n "$img" ] && { docker image inspect "$img" 2>/dev/null | tr -d '\n' >"$pft/img"; } &
echo "hostname$T$(uname -n)"
echo "kernel$T$(uname -r)"
for f in /dev/dri/*; do
  [ -e "$f" ] && stat -c "dri$T%n$T%g$T%G$T%a" -- /dev/dri/* 2>/dev/null
  break
done
sd_xe_hwmon power "$sysfs" 0
[ -d "$wd" ] && echo "workdir_exists"
d=$wd; while [ ! -d "$d" ]; do d=${d%/*}; [ -n "$d" ] || d=/; done
df -Pk "$d" 2>/dev/null | awk -v t="$T" 'NR==2 {print "workdir_avail_kib" t $4}'
i=0
for p in "$@"; do
  case $p in /*) a=$p ;; *) a=$wd/$p ;; esac
  if [ -d "$a" ]; then k=dir; n=false
    for e in "$a"/* "$a"/.[!.]* "$a"/..?*; do if [ -e "$e" ] || [ -L "$e" ]; then n=true; break; fi; done
  elif [ -f "$a" ]; then k=file; if [ -s "$a" ]; then n=true; else n=false; fi
  elif [ -e "$a" ]; then k=other; n=true
  else k=; n=false; fi
  echo "path$T$i$T$k$T$n"; i=$((i + 1))
done
[ -n "$port" ] && awk -v p="$port" 'FNR > 1 && $4 == "0A" { n = split($2, a, ":"); if (a[n] == sprintf("%04X", p)) { print "port_listening"; exit } }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
wait
dv=; cv=; IFS= read -r dv <"$pft/dv"; IFS= read -r cv <"$pft/cv"
echo "docker$T$dv"
echo "compose$T$cv"
if [ -s "$pft/img" ]; then printf 'image%s' "$T"; cat "$pft/img"; echo; fi
if [ -n "$port" ]; then while IFS= read -r ln; do [ -n "$ln" ] && echo "holder$T$ln"; done <"$pft/pc"; fi
"""  # noqa: E501 - a shell program: its lines are the script's


def parse_facts(host: str, workdir: str, facts_text: str, port: int | None,
                paths: list[tuple[str, str]] | tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """The records :data:`PREFLIGHT_SCRIPT` printed → the facts dict (without ``lock``: the
    caller adds it from the host state); ``paths``: the script's path arguments, in order, as
    ``(given, absolute path on the host)`` pairs.

    Raises:
        ServedeckError: a record that is not the script's (the output is cut or mixed with
            something else).
    """
    records: dict[str, list[list[str]]] = {}
    for line in facts_text.splitlines():
        if not line.strip():
            continue
        key, *fields = line.split("\t")
        if key not in _RECORDS:
            raise ServedeckError(f"host {host}: the preflight printed an unexpected line: {line[:300]!r}")
        records.setdefault(key, []).append(fields)
    one = {k: v[0] for k, v in records.items()}
    if "hostname" not in one or "docker" not in one:
        raise ServedeckError(f"host {host}: the preflight output is incomplete: {facts_text.strip()[:300]!r}")
    server, _, api = one["docker"][0].partition(" ")
    kinds = {int(i): (kind or None, nonempty == "true") for i, kind, nonempty in records.get("path", [])}
    avail = one.get("workdir_avail_kib", [""])[0]
    facts: dict[str, Any] = {
        "host": host,
        "hostname": one["hostname"][0],
        "kernel": one["kernel"][0],
        "docker_server_version": server or None,
        "docker_api_version": api or None,
        "compose_version": one.get("compose", [""])[0] or None,
        "dri_devices": [{"path": p, "gid": int(g), "group": grp, "mode": m}
                        for p, g, grp, m in records.get("dri", [])],
        "gpu_power_caps": [{"path": f"{r['path']}/power1_max", "cap_w": r["current_w"],
                            "cap_max_w": r["rated_max_w"]}
                           for r in map(xe_hwmon_record, records.get("power", []))],
        "workdir": {"path": workdir, "exists": "workdir_exists" in one,
                    "free_gib": round(int(avail) / 1024**2, 2) if avail.isdigit() else None},
        "paths": {given: {"path": absolute, "exists": kind is not None, "nonempty": nonempty, "kind": kind}
                  for i, (given, absolute) in enumerate(paths)
                  for kind, nonempty in [kinds.get(i, (None, False))]},
        "port": None,
        "image": _image_document(host, one.get("image", [""])[0]),
        "lock": None,
    }
    if port is not None:
        holders = [fields[0].partition("|") for fields in records.get("holder", [])]
        facts["port"] = {"port": int(port), "listening": "port_listening" in one,
                         "containers": [name for name, _, _ in holders],
                         "compose_workdirs": {name: wd or None for name, _, wd in holders}}
    return facts


_RECORDS = ("hostname", "kernel", "dri", "power", "workdir_exists", "workdir_avail_kib", "path",
            "port_listening", "docker", "compose", "image", "holder")


def _image_document(host: str, text: str) -> dict[str, Any] | None:
    """``docker image inspect`` output (the Engine's array; empty when the image is absent) →
    its one document, or None."""
    if not text.strip():
        return None
    try:
        docs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServedeckError(f"host {host}: `docker image inspect` printed no JSON: {exc}: {text[:300]}") from exc
    return docs[0] if docs else None


def microwatts_to_w(value: str | None) -> float | None:
    """A sysfs power value (microwatts, an integer as text) → watts; None when it is not one."""
    if value is None or not str(value).strip().lstrip("-").isdigit():
        return None
    return int(value) / 1e6
