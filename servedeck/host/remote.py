"""One card host: the facade of the host layer, the only code that does host I/O.

A deploy reaches a host only through :class:`RemoteHost` (unit tests fake it at this one seam):

* commands and files over SSH (:mod:`servedeck.host.ssh`: system OpenSSH, one host-key policy,
  one shared connection),
* the Docker Engine (:attr:`RemoteHost.engine`, :mod:`servedeck.host.docker`: the docker SDK's
  public API over a Unix socket forwarded through that same connection),
* the served HTTP API (:meth:`RemoteHost.server_api`, :mod:`servedeck.host.http`),
* host facts, the deploy lock (:mod:`servedeck.host.lock`) and the deployment history with
  its known-good compose files (:mod:`servedeck.host.history`), read and changed in as few
  round trips as a deploy needs: :meth:`preflight` (facts + lock + history),
  :meth:`switch` (upload + history line + ``docker compose up``), :meth:`finish` (final history
  line + known-good copy + pruning + lock release).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from servedeck.compose.document import literal_values
from servedeck.errors import ServedeckError
from servedeck.grammar import SHA256_RE, compose_project_name
from servedeck.host import history as hist
from servedeck.host.docker import Engine
from servedeck.host.facts import COMPOSE_SH, PREFLIGHT_SCRIPT, parse_facts
from servedeck.host.http import ServerApi
from servedeck.host.lock import RELEASE_SCRIPT, LockInfo, held_error, new_lock, parse_lock, unwritable_error
from servedeck.host.ssh import (DEFAULT_TIMEOUT_S, HostUnreachable, ResolvedTarget, Result,
                                SshTarget, SshTransport)

__all__ = ["RemoteHost", "HostState", "SwitchStatus", "SWITCH_NOT_STARTED", "SWITCH_COMPOSE_MARK", "SshTarget",
           "LockInfo", "Result", "ResolvedTarget", "HostUnreachable", "COMPOSE"]

COMPOSE = "docker-compose.yml"
"""The deployed compose file, ``<workdir>/docker-compose.yml``."""

# Files as base64, one line per path in {paths}: "1 <base64>" read, "0" missing, "2" exists but
# cannot be read.
_B64_FILES = ('for f in {paths}; do if [ -e "$f" ]; then if b=$(base64 -w0 -- "$f"); then printf "1 %s\\n" "$b"; '
              'else echo 2; fi; else echo 0; fi; done')


def _decode_b64_files(paths: list[str], lines: list[str]) -> dict[str, bytes | None]:
    """The output lines of :data:`_B64_FILES` for ``paths``: ``{path: bytes, or None when
    missing}``; a path that could not be read ("2") or has no line is left out."""
    out: dict[str, bytes | None] = {}
    for path, line in zip(paths, lines):
        flag, _, data = line.partition(" ")
        if flag in ("0", "1"):
            out[path] = base64.b64decode(data) if flag == "1" else None
    return out


# $1 destination, $2 sha256 expected; stdin: the bytes. Written 0600 (compose files can hold
# secrets), checked, then renamed over the destination.
_UPLOAD_SCRIPT = r"""
set -eu
dst=$1
dir=$(dirname "$dst")
mkdir -p "$dir"
tmp=$(mktemp "$dir/.servedeck-upload.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
chmod "$3" "$tmp"
got=$(sha256sum "$tmp" | cut -d' ' -f1)
[ "$got" = "$2" ] || { echo "checksum mismatch: sent $2, got $got" >&2; exit 3; }
mv -f "$tmp" "$dst"
"""

# Appended to a script that set $wd; SD_LOCK (JSON) / SD_FORCE set before. Sections ==name.
_STATE_SCRIPT = r"""
sd=$wd/.servedeck; lock=$sd/deploy.lock
echo "==lock"
if [ -n "$SD_LOCK" ]; then
  # the lock is a complete file or nothing: written to a temp file, read back, then linked
  tmp=
  if ! err=$(mkdir -p "$sd" 2>&1); then echo unwritable; echo "$err"
  elif ! tmp=$(mktemp "$lock.XXXXXX" 2>&1); then echo unwritable; echo "$tmp"; tmp=
  # written by cat, not printf: dash's printf reports any failed write as "I/O error", cat names
  # the cause ("No space left on device")
  elif ! err=$( { printf '%s' "$SD_LOCK" | cat > "$tmp"; } 2>&1 ) || [ "$(cat "$tmp" 2>/dev/null)" != "$SD_LOCK" ]; then
    echo unwritable; echo "${err:-writing $tmp came out short}"
  elif err=$(ln "$tmp" "$lock" 2>&1); then echo acquired
  elif [ ! -e "$lock" ]; then echo unwritable; echo "$err"
  elif [ "$SD_FORCE" = force ]; then
    old=$(cat "$lock" 2>/dev/null)
    if err=$(mv -f "$tmp" "$lock" 2>&1); then tmp=; echo replaced; printf '%s\n' "$old"; else echo unwritable; echo "$err"; fi
  else echo held; cat "$lock" 2>/dev/null; echo; fi
  [ -z "$tmp" ] || rm -f "$tmp"
elif [ -f "$lock" ]; then echo held; cat "$lock"; echo
else echo free; fi
echo "==compose"
if [ -f "$wd/docker-compose.yml" ]; then sha256sum < "$wd/docker-compose.yml" | cut -d' ' -f1; fi
echo "==good"
ls "$sd/good" 2>/dev/null || true
echo "==history"
cat "$sd/history.jsonl" 2>/dev/null || true
"""  # noqa: E501 - a shell program: its lines are the script's

SWITCH_NOT_STARTED = (3, 4, 6)
"""Exit statuses of the switch script that mean it changed nothing: the file could not be
installed (3: checksum mismatch, a short write; 4: the working directory cannot be written, the
message says why; 6: no such known-good file). The running deployment serves on."""

SWITCH_COMPOSE_MARK = "servedeck-switch: compose up"
"""What the switch script prints (stdout) just before Compose starts: from there on the old
server may be stopped."""

CLEAR_WORKDIR_SH = r"""
sd_clear_workdir() {  # $1 working directory, $2 Compose project
  # another project's container here (an older naming, or by hand) goes; so does one of ours that
  # does not run (created, exited, dead): what an interrupted Compose leaves between stopping the
  # old container and removing it (the old one renamed <id>_<name>, the new one created), whose
  # name the next `up` would find taken ("Conflict. The container name ... is already in use").
  # One Engine call; a Docker CLI without {{.State}} in `ps --format` is asked per container.
  sd_here="label=com.docker.compose.project.working_dir=$1"
  sd_found=$(docker ps -a --filter "$sd_here" --format '{{.ID}}|{{.Label "com.docker.compose.project"}}|{{.State}}' 2>/dev/null) ||
    sd_found=$(for c in $(docker ps -aq --filter "$sd_here" 2>/dev/null); do
      docker inspect -f "$c"'|{{index .Config.Labels "com.docker.compose.project"}}|{{.State.Status}}' "$c" 2>/dev/null
    done)
  printf '%s\n' "$sd_found" | while IFS='|' read -r c p st; do
    [ -n "$c" ] || continue
    if [ "$p" != "$2" ]; then docker stop "$c" >/dev/null 2>&1; docker rm -f "$c" >/dev/null 2>&1
    elif [ "$st" != running ] && [ "$st" != restarting ]; then docker rm -f "$c" >/dev/null 2>&1
    fi
  done
}
"""  # noqa: E501 - a shell program: its lines are the script's
"""``sd_clear_workdir WORKDIR PROJECT``: the switch's clearing before compose's replace (POSIX ``sh``)."""

# $1 workdir, $2 source ("-": stdin, else a good/ hash), $3 sha256, $4 history line, $5 the
# Compose project, $6 the revision, then the `docker compose up` arguments. Installs the compose
# file (0600), appends the history line, clears the workdir's containers that would stand in the
# new one's way (sd_clear_workdir), then runs compose up in the workdir's project in the
# background of this script, recording "REVISION PID" in .servedeck/switch.pid while it runs and
# "REVISION STATUS" in .servedeck/switch.done when it ended: the host keeps the step's outcome
# whatever happens to the connection that started it (RemoteHost.switch_status reads it).
_SWITCH_SCRIPT = COMPOSE_SH + hist.APPEND_SH + CLEAR_WORKDIR_SH + r"""
set -u
umask 077
wd=$1; src=$2; sha=$3; line=$4; proj=$5; rev=$6; shift 6
sd=$wd/.servedeck
nothing() { echo "servedeck-switch: $1; nothing was changed" >&2; exit 4; }
err=$(mkdir -p "$sd" 2>&1) || nothing "cannot create $sd: $err"
tmp=$(mktemp "$wd/.servedeck-upload.XXXXXX" 2>&1) || nothing "cannot create a file in $wd: $tmp"
if [ "$src" = - ]; then
  err=$( { cat > "$tmp"; } 2>&1 ) || { rm -f "$tmp"; nothing "cannot write $tmp: $err"; }
else
  cp "$sd/good/$src.yml" "$tmp" 2>/dev/null || { rm -f "$tmp"; echo "no known-good file $src.yml" >&2; exit 6; }
fi
chmod 600 "$tmp"
got=$(sha256sum "$tmp" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  rm -f "$tmp"
  df=$(df -P "$wd" 2>/dev/null | awk 'NR==2 {print $4 " KiB free"}')
  echo "checksum mismatch: want $sha, got $got (a short write? ${df:-})" >&2; exit 3
fi
err=$( { sd_append "$sd/history.jsonl" "$line"; } 2>&1 ) || { rm -f "$tmp"; nothing "cannot append to $sd/history.jsonl: $err"; }
err=$(mv -f "$tmp" "$wd/docker-compose.yml" 2>&1) || { rm -f "$tmp"; nothing "cannot install $wd/docker-compose.yml: $err"; }
rm -f "$sd/switch.done"
echo "$SWITCH_MARK"
(
  sd_clear_workdir "$wd" "$proj"
  sd_compose -p "$proj" -f "$wd/docker-compose.yml" --project-directory "$wd" "$@"
) &
pid=$!
printf '%s %s\n' "$rev" "$pid" > "$sd/switch.pid" 2>/dev/null
wait "$pid"; rc=$?
printf '%s %s\n' "$rev" "$rc" > "$sd/switch.done" 2>/dev/null
rm -f "$sd/switch.pid"
exit $rc
""".replace("$SWITCH_MARK", SWITCH_COMPOSE_MARK)  # noqa: E501 - a shell program: its lines are the script's

# $1 workdir, $2 revision. Prints what the host knows of that revision's switch: "running",
# "done STATUS", "installed" (its history line was written and nothing records compose's end:
# the script could not write switch.done, or it was killed), or "absent" (it never got that far),
# then the sha256 of the deployed compose file.
_SWITCH_STATUS_SCRIPT = r"""
sd=$1/.servedeck; rev=$2
state=absent
for attempt in 1 2; do
  if [ -f "$sd/switch.pid" ] && read -r r p < "$sd/switch.pid" && [ "$r" = "$rev" ] && kill -0 "$p" 2>/dev/null; then state=running; break; fi
  if [ -f "$sd/switch.done" ] && read -r r c < "$sd/switch.done" && [ "$r" = "$rev" ]; then state="done $c"; break; fi
  if grep -q "^{\"revision\":$rev,.*\"outcome\":\"started\"" "$sd/history.jsonl" 2>/dev/null; then state=installed; else state=absent; fi
  [ "$attempt" = 1 ] && sleep 1
done
echo "$state"
if [ -f "$1/docker-compose.yml" ]; then sha256sum < "$1/docker-compose.yml" | cut -d' ' -f1; else echo; fi
"""  # noqa: E501 - a shell program: its lines are the script's

# $1 workdir, $2 revision: SIGTERM to that revision's running compose step.
_SWITCH_STOP_SCRIPT = r"""
sd=$1/.servedeck
if [ -f "$sd/switch.pid" ] && read -r r p < "$sd/switch.pid" && [ "$r" = "$2" ]; then kill -TERM "$p" 2>/dev/null && echo stopping; fi
"""  # noqa: E501 - a shell program: its lines are the script's

# $1 workdir, $2 history line, $3 good sha to store ("" none), $4 lock JSON to release ("" keep),
# $5 history lines to keep, then the good hashes to keep. Prints the lock release status.
_FINISH_SCRIPT = hist.APPEND_SH + r"""
set -u
umask 077
wd=$1; line=$2; store=$3; mine=$4; keep=$5; shift 5
sd=$wd/.servedeck; mkdir -p "$sd/good" 2>/dev/null; chmod 700 "$sd" "$sd/good" 2>/dev/null
err=$( { sd_append "$sd/history.jsonl" "$line"; } 2>&1 ) || echo "servedeck-finish: the final history line(s) could not be written: $err" >&2
rm -f "$sd/switch.done"
if [ -n "$store" ] && [ -f "$wd/docker-compose.yml" ]; then
  got=$(sha256sum < "$wd/docker-compose.yml" | cut -d' ' -f1)
  if [ "$got" = "$store" ] && [ ! -f "$sd/good/$store.yml" ]; then
    t=$(mktemp "$sd/good/.new.XXXXXX"); cp "$wd/docker-compose.yml" "$t"; chmod 600 "$t"; mv -f "$t" "$sd/good/$store.yml"
  fi
fi
if [ $# -gt 0 ] || [ -n "$store" ]; then
  for f in "$sd/good"/*.yml; do
    [ -e "$f" ] || continue
    h=$(basename "$f" .yml); k=no
    for w in "$@" "$store"; do [ "$h" = "$w" ] && k=yes; done
    [ $k = yes ] || rm -f "$f"
  done
fi
n=$(wc -l < "$sd/history.jsonl")
if [ "$n" -gt "$keep" ]; then t=$(mktemp "$sd/.hist.XXXXXX"); tail -n "$keep" "$sd/history.jsonl" > "$t"; chmod 600 "$t"; mv -f "$t" "$sd/history.jsonl"; fi
lock=$sd/deploy.lock
if [ -z "$mine" ]; then echo kept
elif [ ! -f "$lock" ]; then echo absent
elif [ "$(cat "$lock")" = "$mine" ]; then rm -f "$lock"; echo released
else echo other; cat "$lock"; fi
"""  # noqa: E501 - a shell program: its lines are the script's


@dataclass(frozen=True)
class SwitchStatus:
    """What the host knows of one revision's switch.

    Attributes:
        state: ``running`` (Compose runs), ``done`` (it ended: ``rc``), ``installed`` (the file
            was installed and its history line written, and nothing records Compose's end) or
            ``absent`` (the switch never got that far: nothing was changed).
        rc: Compose's exit status (``done``), else None.
        compose_sha256: the sha256 of the deployed ``docker-compose.yml`` now (None: none).
    """

    state: str
    rc: int | None
    compose_sha256: str | None


@dataclass
class HostState:
    """servedeck's state on a host, read in one round trip (and the lock, if one was asked for).

    Attributes:
        lock: ``acquired`` (ours now) | ``replaced`` (ours now; ``replaced`` holds the stale
            lock we took over) | ``held`` (someone else's: ``holder``) | ``free`` |
            ``unwritable`` (the working directory cannot be written: ``unwritable`` says why;
            no lock was taken and nothing was left behind).
        holder: the other lock (``held``), or None; ``holder_raw`` its text if unparsable
            (``"(empty)"`` for an empty lock file: damage, no command holds it).
        unwritable: the host's own words for why the lock could not be written.
        replaced: the lock taken over with force, or None.
        compose_sha256: sha256 of the deployed ``docker-compose.yml`` (None: none).
        good: hashes of the known-good compose files stored in ``.servedeck/good/``.
        history: the ``history.jsonl`` records, oldest first.
    """

    lock: str
    holder: LockInfo | None = None
    holder_raw: str = ""
    unwritable: str | None = None
    replaced: LockInfo | None = None
    compose_sha256: str | None = None
    good: set[str] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)

    def known_good(self) -> list[hist.Revision]:
        """Known-good revisions whose file is stored, newest first."""
        return hist.known_good(self.history, self.good)


class RemoteHost:
    """One card host reached over SSH.

    Args:
        name: the inventory name (``b70``), used in messages.
        ssh_target: how to reach it.
        workdir: absolute path of servedeck's working directory on the host (compose file,
            ``models/``, ``cache/``, ``.servedeck/`` state).
        transport: the :class:`SshTransport` to ``ssh_target`` to use (one whose session is
            already opening); a new one by default.

    Every method that runs something raises :class:`~servedeck.host.ssh.HostUnreachable`
    when the host cannot be reached, and :class:`ServedeckError` when its host key is unknown
    or changed, or (with ``check=True``) the command fails. Call :meth:`close` when done.
    """

    def __init__(self, name: str, ssh_target: SshTarget, workdir: str, *,
                 transport: SshTransport | None = None) -> None:
        if not workdir.startswith("/"):
            raise ServedeckError(f"host {name}: workdir must be an absolute path, got {workdir!r}",
                                 field="workdir")
        self.name = name
        self.ssh_target = ssh_target
        self.workdir = workdir.rstrip("/") or "/"
        self.transport = transport or SshTransport(name, ssh_target)
        self._engine: Engine | None = None
        self._held_lock: str | None = None
        self._pending_lock: str | None = None
        self.api_version: str | None = None
        self._snapshot: dict[str, bytes | None] = {}
        self.finish_problem: str | None = None

    def __repr__(self) -> str:
        return f"RemoteHost({self.name!r}, {self.ssh_target.destination!r}, {self.workdir!r})"

    # ------------------------------------------------------------------ paths

    @property
    def project(self) -> str:
        """The Compose project of this working directory
        (:func:`servedeck.grammar.compose_project_name`): every compose command servedeck runs
        here names it, and the rendered file carries it (``name:``)."""
        return compose_project_name(self.workdir)

    @property
    def compose_path(self) -> str:
        """``<workdir>/docker-compose.yml``."""
        return f"{self.workdir}/{COMPOSE}"

    @property
    def lock_path(self) -> str:
        """``<workdir>/.servedeck/deploy.lock``."""
        return f"{self.workdir}/{hist.STATE_DIR}/{hist.LOCK_NAME}"

    @property
    def history_path(self) -> str:
        """``<workdir>/.servedeck/history.jsonl``."""
        return f"{self.workdir}/{hist.STATE_DIR}/{hist.HISTORY_NAME}"

    @property
    def good_dir(self) -> str:
        """``<workdir>/.servedeck/good``: known-good compose files by sha256."""
        return f"{self.workdir}/{hist.STATE_DIR}/{hist.GOOD_DIR}"

    def good_file(self, compose_sha256: str) -> str:
        """``<workdir>/.servedeck/good/<sha256>.yml``: the known-good copy of one compose file."""
        return f"{self.good_dir}/{compose_sha256}.yml"

    def abspath(self, remote_path: str) -> str:
        """``remote_path`` if absolute, else ``<workdir>/<remote_path>``."""
        return remote_path if remote_path.startswith("/") else f"{self.workdir}/{remote_path}"

    # ------------------------------------------------------------------ transport

    def resolve(self) -> ResolvedTarget:
        """Effective SSH settings (``ssh -G``), see :meth:`SshTransport.resolve`."""
        return self.transport.resolve()

    def run(self, cmd: list[str] | str, *, check: bool = True, input: bytes | None = None,
            timeout: float | None = DEFAULT_TIMEOUT_S) -> Result:
        """Run a command on the host (:meth:`SshTransport.run`)."""
        return self.transport.run(cmd, check=check, input=input, timeout=timeout)

    def run_script(self, script: str, args: list[str] | tuple[str, ...] = (), *,
                   check: bool = True, input: bytes | None = None,
                   timeout: float | None = DEFAULT_TIMEOUT_S) -> Result:
        """Run a POSIX ``sh`` script with positional ``args`` (:meth:`SshTransport.run_script`)."""
        return self.transport.run_script(script, args, check=check, input=input, timeout=timeout)

    def reconnect(self) -> None:
        """After a transport fault: use a fresh SSH connection (and Engine forwarding) from now."""
        self.transport.reconnect()
        if self._engine is not None:
            self._engine.reset()

    @property
    def engine(self) -> Engine:
        """The host's Docker Engine (:class:`~servedeck.host.docker.Engine`), over SSH."""
        if self._engine is None:
            self._engine = Engine(self.transport, api_version=self.api_version)
        return self._engine

    def server_api(self, base_url: str, api_key: str | None = None, *,
                   timeout_s: float = 2.0) -> ServerApi:
        """The served HTTP API at ``base_url`` (:class:`~servedeck.host.http.ServerApi`)."""
        return ServerApi(base_url, api_key, timeout_s=timeout_s)

    def close(self) -> None:
        """Close the Engine client and its socket forwarding, and end the remote session (the
        SSH master persists 60 s)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self.transport.close()

    # ------------------------------------------------------------------ files

    def upload_atomic(self, remote_path: str, data: bytes, *, mode: str = "600",
                      timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        """Write ``data`` to ``remote_path`` atomically; return its SHA-256 (hex).

        The bytes go to a temp file in the same directory (``mode``, default 0600: compose
        files can hold secrets), are checked against the local SHA-256, then renamed over
        ``remote_path``: a reader sees the old or the new file, never a partial one.
        Relative paths are under the workdir.

        Raises:
            ServedeckError: the transfer failed or the bytes on the host differ (the
                previous file is then left untouched).
        """
        digest = hashlib.sha256(data).hexdigest()
        self._snapshot.pop(self.abspath(remote_path), None)
        self.run_script(_UPLOAD_SCRIPT, [self.abspath(remote_path), digest, mode], input=data,
                        timeout=timeout)
        return digest

    def read_file(self, remote_path: str, *, missing_ok: bool = False) -> bytes | None:
        """Bytes of a file on the host (relative paths are under the workdir).

        Returns None when it does not exist and ``missing_ok``. A file read by
        :meth:`preflight` (``read=``) and not written through this object since is served from
        that read.

        Raises:
            ServedeckError: it does not exist (unless ``missing_ok``) or cannot be read.
        """
        path = self.abspath(remote_path)
        if path in self._snapshot:  # read in the preflight round trip, not written since
            data = self._snapshot[path]
            if data is None and not missing_ok:
                raise ServedeckError(f"host {self.name}: {path} does not exist")
            return data
        res = self.run_script('if [ -e "$1" ]; then exec cat -- "$1"; else exit 44; fi', [path],
                              check=False)
        if res.returncode == 44:
            if missing_ok:
                return None
            raise ServedeckError(f"host {self.name}: {path} does not exist")
        if res.returncode != 0:
            raise ServedeckError(f"host {self.name}: cannot read {path}: {res.stderr.strip()}")
        return res.stdout_bytes

    # ------------------------------------------------------------------ compose

    def compose(self, args: list[str], *, file: str = COMPOSE, check: bool = True,
                timeout: float | None = 900.0) -> Result:
        """Run ``docker compose -p <project> -f <workdir>/<file> --project-directory <workdir>
        <args...>`` on the host (Compose v2, :data:`~servedeck.host.facts.COMPOSE_SH`). Same
        errors as :meth:`run`."""
        return self.run_script(COMPOSE_SH + 'sd_compose "$@"',
                               ["-p", self.project, "-f", self.abspath(file), "--project-directory",
                                self.workdir, *args],
                               check=check, timeout=timeout)

    def normalised_service(self, file: str = COMPOSE, service: str | None = None, *,
                           or_first: bool = False) -> tuple[str, dict[str, Any]] | None:
        """Service ``service`` (None: the first, in Compose's order: by name; ``or_first``: also
        when the file has no ``service``) of ``docker compose config --format json`` of a compose
        file on the host, as ``(name, mapping)`` in Compose's normalised form, with its strings
        as the container gets them: variables substituted from the host's environment and the
        project's ``.env``, as ``up`` would, and the ``$$`` Compose prints for a literal ``$``
        undone. None when compose refuses the file or it has no such service. Same errors as
        :meth:`run`."""
        res = self.compose(["config", "--format", "json"], file=file, check=False, timeout=120)
        if res.returncode != 0:
            return None
        services = json.loads(res.stdout).get("services") or {}
        if not services:
            return None
        if service is not None and service in services:
            name: str = service
        elif service is None or or_first:
            name = next(iter(services))
        else:
            return None
        return name, literal_values(services[name])

    def switch(self, compose_args: list[str], history_line: dict[str, Any], *,
               data: bytes | None = None, good_sha: str | None = None,
               timeout: float | None = 900.0) -> Result:
        """Install a compose file and run compose on it, in ONE round trip.

        The file is ``data`` (uploaded) or the stored known-good file ``good_sha``; it is
        written 0600, checked by sha256, the ``history_line`` (with its ``revision``) is
        appended, then it is renamed over ``docker-compose.yml``, the working directory's
        containers of another Compose project and its own that do not run (what a stopped
        Compose leaves) are removed, and ``docker compose <compose_args>`` runs; the host records
        the step while it runs and how it ended (:meth:`switch_status`), whatever happens to
        this connection.

        Returns:
            the :class:`Result`: an exit status in :data:`SWITCH_NOT_STARTED` (the message on
            stderr says why) when nothing was changed, else Compose's, with
            :data:`SWITCH_COMPOSE_MARK` on stdout.
        """
        if (data is None) == (good_sha is None):
            raise ValueError("give exactly one of data and good_sha")
        if good_sha is not None and not SHA256_RE.match(good_sha):
            raise ValueError(f"not a sha256: {good_sha!r}")
        sha = hashlib.sha256(data).hexdigest() if data is not None else good_sha
        args = [self.workdir, "-" if data is not None else str(good_sha), str(sha),
                hist.line(history_line).decode().rstrip("\n"), self.project,
                str(int(history_line["revision"])), *compose_args]
        return self.run_script(_SWITCH_SCRIPT, args, input=data, check=False, timeout=timeout)

    def switch_status(self, revision: int, *, timeout: float = 10.0) -> SwitchStatus:
        """What the host knows of revision ``revision``'s switch (:data:`_SWITCH_STATUS_SCRIPT`),
        in one command of its own (a switch in progress holds the session).

        Raises:
            HostUnreachable: no answer within ``timeout`` seconds.
        """
        res = self.run_script(_SWITCH_STATUS_SCRIPT, [self.workdir, str(int(revision))], check=False,
                              timeout=timeout)
        lines = res.stdout.splitlines() + ["", ""]
        state, _, rc = lines[0].strip().partition(" ")
        if state not in ("running", "done", "installed", "absent"):
            raise HostUnreachable(f"host {self.name}: the switch status came back as {res.stdout[:200]!r}")
        return SwitchStatus(state, int(rc) if rc.strip().lstrip("-").isdigit() else None,
                            lines[1].strip() or None)

    def stop_switch(self, revision: int, *, timeout: float = 10.0) -> bool:
        """Send SIGTERM to revision ``revision``'s Compose step if it still runs; True if it did.

        Raises:
            HostUnreachable: no answer within ``timeout`` seconds.
        """
        res = self.run_script(_SWITCH_STOP_SCRIPT, [self.workdir, str(int(revision))], check=False,
                              timeout=timeout)
        return "stopping" in res.stdout

    # ------------------------------------------------------------------ state, lock, history

    def _state_script(self, lock_owner: str | None, force: bool) -> str:
        payload = ""
        if lock_owner is not None:
            payload = new_lock(lock_owner).model_dump_json()
        self._pending_lock = payload or None
        return (f"\nSD_LOCK={shlex.quote(payload)}; SD_FORCE={'force' if force else ''}\n"
                + _STATE_SCRIPT)

    def _parse_state(self, text: str, lock_owner: str | None) -> HostState:
        sections: dict[str, list[str]] = {}
        current = None
        for ln in text.splitlines():
            if ln.startswith("==") and ln[2:] in ("lock", "compose", "good", "history"):
                current = ln[2:]
                sections[current] = []
            elif current is not None:
                sections[current].append(ln)
        lock_lines = [ln for ln in sections.get("lock", []) if ln.strip()]
        if not lock_lines:
            raise HostUnreachable(f"host {self.name}: the state script returned no lock status")
        status, rest = lock_lines[0].strip(), "\n".join(lock_lines[1:])
        state = HostState(lock=status)
        if status == "unwritable":
            self._pending_lock = None
            state.unwritable = rest.strip() or "the host gave no reason"
        if status in ("acquired", "replaced"):
            self._held_lock = self._pending_lock
            if status == "replaced" and rest.strip():
                try:
                    state.replaced = LockInfo.model_validate_json(rest)
                except ValueError:
                    state.replaced = None
        elif status == "held":
            try:
                state.holder = LockInfo.model_validate_json(rest)
            except ValueError:
                state.holder_raw = rest.strip() or "(empty)"
        sha = "".join(sections.get("compose", [])).strip()
        state.compose_sha256 = sha or None
        state.good = {f[:-4] for f in sections.get("good", []) if f.endswith(".yml") and SHA256_RE.match(f[:-4])}
        state.history = hist.history_records("\n".join(sections.get("history", [])).encode())
        return state

    def state(self, *, lock_owner: str | None = None, force_unlock: bool = False) -> HostState:
        """servedeck's state on the host in ONE round trip; with ``lock_owner``, also take the
        deploy lock (``force_unlock``: take it over from whoever holds it).

        The caller checks ``state.lock``: ``held`` means someone else has it (see
        :func:`servedeck.host.lock.held_error`).
        """
        res = self.run_script("wd=$1\n" + self._state_script(lock_owner, force_unlock),
                              [self.workdir], timeout=60)
        return self._parse_state(res.stdout, lock_owner)

    def read_lock(self) -> LockInfo | None:
        """The deploy lock on the host, or None when free.

        Raises:
            ServedeckError: the lock file exists but is not valid lock JSON (hint: force_unlock).
        """
        data = self.read_file(self.lock_path, missing_ok=True)
        return None if data is None else parse_lock(self.name, self.lock_path, data)

    def acquire_lock(self, owner: str, *, force: bool = False,
                     stale_after_h: float | None = None) -> LockInfo:
        """Take the host's deploy lock (atomic ``ln`` of a fully written temp file); return it.
        (:meth:`state` takes it too, together with the history, in the same round trip.)

        Raises:
            ServedeckError: the lock is held; the message names owner, pid, host and start
                time, says whether it looks stale, and hints at ``--force-unlock``.
        """
        state = self.state(lock_owner=owner, force_unlock=force)
        if state.lock == "unwritable":
            raise unwritable_error(self.name, self.workdir, state.unwritable or "")
        if state.lock == "held":
            kw = {} if stale_after_h is None else {"stale_after_h": stale_after_h}
            if state.holder is None and state.holder_raw:
                parse_lock(self.name, self.lock_path, state.holder_raw)  # raises: not valid
            raise held_error(self.name, state.holder, raw=state.holder_raw, **kw)
        assert self._held_lock is not None
        return LockInfo.model_validate_json(self._held_lock)

    def release_lock(self) -> None:
        """Release the lock this object took.

        Raises:
            ServedeckError: this object holds no lock, or the lock on the host is no longer
                ours (someone force-unlocked and re-locked); the other lock is left alone.
        """
        if self._held_lock is None:
            raise ServedeckError(f"host {self.name}: release_lock without holding the lock")
        res = self.run_script(RELEASE_SCRIPT, [self.lock_path, self._held_lock])
        self._held_lock = None
        status, _, rest = res.stdout.partition("\n")
        if status.strip() == "other":
            raise ServedeckError(f"host {self.name}: the deploy lock is no longer ours, left "
                                 f"in place: {rest.strip()}")

    @property
    def holds_lock(self) -> bool:
        return self._held_lock is not None

    def force_unlock(self) -> LockInfo | None:
        """Remove the deploy lock whoever holds it; return what it held (None if free)."""
        data = self.read_file(self.lock_path, missing_ok=True)
        self.run(["rm", "-f", self.lock_path])
        self._held_lock = None
        if data is None:
            return None
        try:
            return LockInfo.model_validate_json(data)
        except ValueError:
            return None

    def append_history(self, line: dict[str, Any]) -> None:
        """Append ``line`` as one JSON line to ``<workdir>/.servedeck/history.jsonl``.

        One ``>>`` append (O_APPEND) of a single line, so concurrent appends do not
        interleave. Values must be JSON-serialisable.
        """
        self.run_script(hist.APPEND_SH + 'set -eu; umask 077; mkdir -p "$(dirname "$1")"; sd_append "$1" "$2"',
                        [self.history_path, hist.line(line).decode().rstrip("\n")])

    def finish(self, history_lines: list[dict[str, Any]], *, store_good: str | None = None,
               keep_good: list[str] | tuple[str, ...] = (), release: bool = True) -> str:
        """Close a revision in ONE round trip: append its final ``history_lines``; with
        ``store_good`` (the sha256 of the deployed file, which served) copy the deployed file
        to ``good/<sha>.yml``; prune ``good/`` to ``keep_good`` (+ ``store_good``) and the
        history to :data:`~servedeck.host.history.KEEP_LINES` lines; release our lock.

        Returns:
            the lock status: ``released`` | ``kept`` | ``absent`` | ``other`` (not ours: left).
            :attr:`finish_problem` says why the final lines could not be written (a full or
            read-only disk), else None.
        """
        mine = self._held_lock if release else None
        self.finish_problem = None
        res = self.run_script(_FINISH_SCRIPT, [self.workdir,
                                               b"".join(map(hist.line, history_lines)).decode().rstrip("\n"),
                                               store_good or "", mine or "", str(hist.KEEP_LINES),
                                               *keep_good], timeout=60)
        if release:
            self._held_lock = None
        problem = [ln for ln in res.stderr.splitlines() if ln.startswith("servedeck-finish: ")]
        if problem:
            self.finish_problem = problem[0].removeprefix("servedeck-finish: ")
        return (res.stdout.splitlines() or ["?"])[0].strip()

    # ------------------------------------------------------------------ facts

    def preflight_facts(self, paths: list[str] | tuple[str, ...] = (),
                        port: int | None = None, image: str | None = None,
                        sysfs_root: str = "/sys") -> dict[str, Any]:
        """Gather host facts in ONE SSH round trip (a POSIX sh script, :mod:`servedeck.host.facts`).

        Args:
            paths: paths to check (relative ones are under the workdir).
            port: a TCP port to check for a listener.
            image: an image reference to inspect.
            sysfs_root: where sysfs is mounted on the host (the inventory's ``sysfs_root``; a
                stand-in tree in tests), for the card's power limit.

        Returns:
            ``{"host": name, "hostname": str, "kernel": str (uname -r),
            "docker_server_version": str|None, "docker_api_version": str|None,
            "compose_version": str|None,
            "dri_devices": [{"path": "/dev/dri/renderD128", "gid": 992, "group": "render",
            "mode": "660"}],
            "gpu_power_caps": [{"path": ".../hwmon/hwmonN/power1_max", "cap_w": 230.0,
            "cap_max_w": float|None}]   (each xe card's sustained limit and its rated maximum,
            :data:`~servedeck.host.facts.XE_HWMON_SH`; microwatts → W),
            "workdir": {"path": str, "exists": bool, "free_gib": float|None}  (df of the
            workdir or its nearest existing parent),
            "paths": {given: {"path": absolute, "exists": bool, "nonempty": bool,
            "kind": "dir"|"file"|"other"|None}},
            "port": {"port": int, "listening": bool, "containers": [names publishing it],
            "compose_workdirs": {name: its Compose project's working directory (label
            ``com.docker.compose.project.working_dir``) or None}} or None,
            "image": the Engine's inspect document of ``image`` (``Id``, ``RepoDigests``,
            ``Config``, ``Created``, ...) | None (not asked for, or not on the host),
            "lock": LockInfo as dict (JSON types) | {"raw": str} if unparsable | None}``

        Raises:
            ServedeckError: the host is unreachable or the script's output is not its own.
        """
        return self.preflight(paths, port, image=image, sysfs_root=sysfs_root)[0]

    def preflight(self, paths: list[str] | tuple[str, ...] = (), port: int | None = None, *,
                  lock_owner: str | None = None, force_unlock: bool = False,
                  read: list[str] | tuple[str, ...] = (),
                  image: str | None = None, sysfs_root: str = "/sys") -> tuple[dict[str, Any], HostState]:
        """Host facts (:meth:`preflight_facts`) and :meth:`state` in ONE round trip.

        ``read``: files (relative ones under the workdir) read in the same round trip; a later
        :meth:`read_file` of one of them returns these bytes (or None: missing) until this
        object writes it. ``image``: a reference (``repo@sha256:...``) inspected in the same
        round trip (facts ``image``), so that a deploy of an image the host already has needs
        no Engine connection before the switch.

        Raises:
            ServedeckError: as :meth:`preflight_facts` and :meth:`state`.
        """
        args = [self.workdir, "" if port is None else str(int(port)), image or "", sysfs_root, *paths]
        script = PREFLIGHT_SCRIPT + self._state_script(lock_owner, force_unlock)
        wanted = [self.abspath(p) for p in read]
        if wanted:
            script += ("\nprintf '\\n==snapshot\\n'\n"
                       + _B64_FILES.format(paths=" ".join(shlex.quote(p) for p in wanted)) + "\n")
        res = self.run_script(script, args, timeout=60)
        facts_text, _, state_text = ("\n" + res.stdout).partition("\n==lock\n")  # the state's first section
        state_text, _, snapshot = ("==lock\n" + state_text).partition("\n==snapshot\n")
        # an unreadable file is left out: read_file reports it later
        self._snapshot.update(_decode_b64_files(wanted, snapshot.splitlines()))
        state = self._parse_state(state_text, lock_owner)
        facts = parse_facts(self.name, self.workdir, facts_text, port, [(p, self.abspath(p)) for p in paths])
        if state.holder is not None:
            facts["lock"] = state.holder.model_dump(mode="json")
        elif state.holder_raw:
            facts["lock"] = {"raw": state.holder_raw}
        return facts, state

