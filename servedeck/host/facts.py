"""Host facts for a deploy's preflight, gathered by one POSIX ``sh`` script (see
:meth:`servedeck.host.remote.RemoteHost.preflight_facts` for the returned shape).

Sources: ``uname``, ``docker version`` / ``docker compose version``, ``/dev/dri/*`` (stat),
sysfs hwmon ``power1_cap`` (microwatts, Linux ``Documentation/hwmon/sysfs-interface.rst``),
``df -Pk`` of the workdir, ``/proc/net/tcp{,6}`` listeners (state ``0A``), the containers
publishing the port, and ``docker image inspect`` of the deploy's image (the Engine API's
``GET /images/{name}/json`` document, the same one the docker SDK's ``Image.attrs`` holds).
"""

from __future__ import annotations

import json
from typing import Any

from servedeck.errors import ServedeckError

COMPOSE_SH = r"""
sd_compose() {
  if ! grep -qs cliPluginsExtraDirs "${DOCKER_CONFIG:-$HOME/.docker}/config.json"; then
    for p in "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins" /usr/local/lib/docker/cli-plugins \
             /usr/local/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
      if [ -x "$p/docker-compose" ]; then exec "$p/docker-compose" "$@"; fi
    done
  fi
  exec docker compose "$@"
}
"""
"""POSIX ``sh`` function ``sd_compose ARGS...``: exec Compose v2 with ``ARGS`` (as ``docker
compose ARGS``). It runs the Compose CLI plugin binary itself when it sits in one of the Docker
CLI's plugin directories, searched in the CLI's own order (docker/cli ``cli-plugins/manager``,
Linux: ``~/.docker/cli-plugins`` then the four system directories), the way Compose runs
standalone; ``docker compose`` first starts the Docker CLI, which runs the plugin once to read
its metadata and then again to do the work: 0.1-0.2 s of each call on the test machines.
Without the plugin there, or with ``cliPluginsExtraDirs`` in the Docker CLI's config (other
places to look first), it is ``docker compose``."""

# $1 workdir, $2 port ("" none), $3 image reference ("" none), then the paths to check.
# Prints one JSON line.
PREFLIGHT_SCRIPT = COMPOSE_SH + r"""
wd=$1; port=$2; img=$3; shift 3
js() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n\t\r' '   ' | tr -d '\000-\037')"; }
jv() { if [ -n "$1" ]; then js "$1"; else printf null; fi; }
pft=$(mktemp -d) || { echo "servedeck preflight: mktemp -d failed on the host" >&2; exit 1; }; trap 'rm -rf "$pft"' EXIT
# the Docker CLI calls run side by side (each is a process start and an Engine round trip)
docker version --format '{{.Server.Version}} {{.Server.APIVersion}}' >"$pft/dv" 2>/dev/null &
( sd_compose version --short ) >"$pft/cv" 2>/dev/null &
[ -n "$port" ] && docker ps --filter "publish=$port" \
  --format '{{.Names}}|{{.Label "com.docker.compose.project.working_dir"}}' >"$pft/pc" 2>/dev/null &
[ -n "$img" ] && { docker image inspect "$img" 2>/dev/null | tr -d '\n' >"$pft/img"; } &
printf '{"hostname":%s' "$(js "$(uname -n)")"
printf ',"kernel":%s' "$(js "$(uname -r)")"
printf ',"dri":['; sep=
for f in /dev/dri/*; do
  [ -e "$f" ] || continue
  printf '%s[%s,%s,%s,%s]' "$sep" "$(js "$f")" "$(js "$(stat -c %g "$f")")" "$(js "$(stat -c %G "$f")")" "$(js "$(stat -c %a "$f")")"; sep=,
done
printf '],"power":['; sep=
for f in /sys/class/drm/card*/device/hwmon/hwmon*/power1_cap; do
  [ -r "$f" ] || continue
  m=$(cat "${f}_max" 2>/dev/null || true)
  printf '%s[%s,%s,%s]' "$sep" "$(js "$f")" "$(js "$(cat "$f" 2>/dev/null)")" "$(jv "$m")"; sep=,
done
printf '],"workdir_exists":%s' "$( [ -d "$wd" ] && echo true || echo false)"
d=$wd; while [ ! -d "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
printf ',"workdir_avail_kib":%s' "$(jv "$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {print $4}')")"
printf ',"paths":['; sep=
for p in "$@"; do
  case $p in /*) a=$p ;; *) a=$wd/$p ;; esac
  if [ -d "$a" ]; then k=dir; if [ -n "$(ls -A "$a" 2>/dev/null)" ]; then n=true; else n=false; fi
  elif [ -f "$a" ]; then k=file; if [ -s "$a" ]; then n=true; else n=false; fi
  elif [ -e "$a" ]; then k=other; n=true
  else k=; n=false; fi
  printf '%s[%s,%s,%s,%s]' "$sep" "$(js "$p")" "$(js "$a")" "$(jv "$k")" "$n"; sep=,
done
printf ']'
wait
dv=$(cat "$pft/dv" 2>/dev/null)
printf ',"docker_server_version":%s' "$(jv "${dv% *}")"
printf ',"docker_api_version":%s' "$(jv "$(printf '%s' "$dv" | awk '{print $2}')")"
printf ',"compose_version":%s' "$(jv "$(cat "$pft/cv" 2>/dev/null)")"
if [ -s "$pft/img" ]; then printf ',"image":%s' "$(cat "$pft/img")"; else printf ',"image":[]'; fi
if [ -n "$port" ]; then
  hex=$(printf '%04X' "$port")
  l=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h="$hex" '$4 == "0A" { n = split($2, a, ":"); if (a[n] == h) { print "yes"; exit } }')
  printf ',"port_listening":%s' "$( [ "$l" = yes ] && echo true || echo false)"
  printf ',"port_containers":['; sep=
  while IFS= read -r ln; do
    [ -n "$ln" ] || continue
    printf '%s[%s,%s]' "$sep" "$(js "${ln%%|*}")" "$(js "${ln#*|}")"; sep=,
  done <"$pft/pc"
  printf ']'
fi
printf '}\n'
"""


def parse_facts(host: str, workdir: str, facts_text: str, port: int | None) -> dict[str, Any]:
    """The JSON line :data:`PREFLIGHT_SCRIPT` printed → the facts dict (without ``lock``: the
    caller adds it from the host state).

    Raises:
        ServedeckError: the output is not JSON.
    """
    try:
        raw = json.loads(facts_text)
    except json.JSONDecodeError as exc:
        raise ServedeckError(f"host {host}: preflight output is not JSON: {exc}: "
                             f"{facts_text.strip()[:300]}") from exc
    facts: dict[str, Any] = {
        "host": host,
        "hostname": raw["hostname"],
        "kernel": raw["kernel"],
        "docker_server_version": raw["docker_server_version"],
        "docker_api_version": raw["docker_api_version"],
        "compose_version": raw["compose_version"],
        "dri_devices": [{"path": p, "gid": int(g), "group": grp, "mode": m}
                        for p, g, grp, m in raw["dri"]],
        "gpu_power_caps": [{"path": p, "cap_w": _uw_to_w(c), "cap_max_w": _uw_to_w(m)}
                           for p, c, m in raw["power"]],
        "workdir": {"path": workdir, "exists": raw["workdir_exists"],
                    "free_gib": (round(int(raw["workdir_avail_kib"]) / 1024**2, 2)
                                 if raw["workdir_avail_kib"] else None)},
        "paths": {given: {"path": a, "exists": kind is not None, "nonempty": nonempty,
                          "kind": kind}
                  for given, a, kind, nonempty in raw["paths"]},
        "port": None,
        "image": (raw.get("image") or [None])[0],  # the CLI prints the Engine's array: [] when absent
        "lock": None,
    }
    if port is not None:
        holders = raw["port_containers"] or []
        facts["port"] = {"port": int(port), "listening": raw["port_listening"],
                         "containers": [name for name, _ in holders],
                         "compose_workdirs": {name: workdir or None for name, workdir in holders}}
    return facts


def _uw_to_w(value: str | None) -> float | None:
    if value is None or not str(value).strip().lstrip("-").isdigit():
        return None
    return int(value) / 1e6
