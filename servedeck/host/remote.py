"""Talking to a card host: commands over SSH, atomic uploads, Docker, facts, the deploy lock.

This is the only module that reaches a host (HTTP to the served API lives in the bench
module). It holds no deploy logic: ``servedeck.deploy.apply`` plans and applies on top of it.

Transport choice
----------------
Commands run through the **system OpenSSH client** (``ssh``), not paramiko: the user's
``~/.ssh/config`` or a given ``ssh_config`` file then works exactly as it does by hand
(aliases, ``ProxyJump``, agents, certificates, hashed ``known_hosts``), and host-key checking
is OpenSSH's own. servedeck always adds ``-o StrictHostKeyChecking=yes -o BatchMode=yes``
(command-line options win over config files), so an unknown or changed host key is never
accepted silently; it becomes a :class:`~servedeck.errors.ServedeckError` that prints the
fingerprint and the command to trust it.

The Docker API is reached with the docker SDK over **paramiko**: the SDK's shell-out mode
(``use_ssh_client=True``) cannot pass ``-F <ssh_config>`` and, with an alias and no port,
passes ``-p 22`` explicitly; its paramiko mode reads only ``~/.ssh/config`` and
``~/.ssh/known_hosts``. So the target is resolved with ``ssh -G`` (real hostname, port,
user, identity files, known_hosts files) and a paramiko client is built from that, with the
same known_hosts files and ``RejectPolicy`` (unknown or changed keys refused).
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import os
import shlex
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from servedeck.errors import ServedeckError

DEFAULT_TIMEOUT_S = 120.0
"""Default timeout of one SSH command, seconds."""

STATE_DIR = ".servedeck"
"""Directory under the host workdir holding servedeck's own state (lock, history)."""

LOCK_NAME = "deploy.lock"
HISTORY_NAME = "history.jsonl"


# --------------------------------------------------------------------------- targets


class SshTarget(BaseModel):
    """How to reach a host over SSH.

    Either ``alias`` (a ``Host`` entry of ``ssh_config``, or of ``~/.ssh/config`` when
    ``ssh_config`` is not given) or ``hostname`` with optional ``port``/``user``/
    ``identity_file``. ``known_hosts`` overrides the known-hosts file(s) of the config.
    Explicit ``port``/``user``/``identity_file`` also apply on top of an alias.

    Raises:
        pydantic.ValidationError: when neither or both of ``alias`` and ``hostname`` are set.
    """

    model_config = ConfigDict(extra="forbid")

    alias: str | None = None
    hostname: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ssh_config: str | None = None
    known_hosts: str | None = None

    @model_validator(mode="after")
    def _one_destination(self) -> "SshTarget":
        if bool(self.alias) == bool(self.hostname):
            raise ValueError("give exactly one of 'alias' (ssh config Host) or 'hostname'")
        return self

    @property
    def destination(self) -> str:
        """The destination argument given to ``ssh`` (alias or hostname)."""
        return self.alias or self.hostname or ""

    def ssh_options(self) -> list[str]:
        """OpenSSH options (argv before the destination) for this target.

        Always includes ``StrictHostKeyChecking=yes`` and ``BatchMode=yes``.
        """
        opts: list[str] = []
        if self.ssh_config:
            opts += ["-F", os.path.expanduser(self.ssh_config)]
        if self.port is not None:
            opts += ["-p", str(self.port)]
        if self.user:
            opts += ["-l", self.user]
        if self.identity_file:
            opts += ["-i", os.path.expanduser(self.identity_file), "-o", "IdentitiesOnly=yes"]
        if self.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={os.path.expanduser(self.known_hosts)}"]
        opts += ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                 "-o", "ConnectTimeout=15"]
        return opts + self.multiplex_options(opts)

    def multiplex_options(self, opts: list[str]) -> list[str]:
        """OpenSSH connection sharing: one authenticated connection carries every command of a
        deploy (``ControlMaster=auto``, kept 60 s after the last use), instead of a new TCP +
        key exchange + authentication per command.

        The control socket's name includes a hash of the target *and of the trust settings*
        (ssh config, known_hosts, identity), so a command with other trust settings never
        rides on a connection whose host key was checked against a different known_hosts.
        ``$SERVEDECK_SSH_MULTIPLEX=0`` turns sharing off.
        """
        if os.environ.get("SERVEDECK_SSH_MULTIPLEX", "1") == "0":
            return []
        base = f"/tmp/servedeck-ssh-{os.getuid()}"
        os.makedirs(base, mode=0o700, exist_ok=True)
        key = hashlib.sha256("\0".join([self.destination, *opts]).encode()).hexdigest()[:16]
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath={base}/{key}-%C",
                "-o", "ControlPersist=60"]


@dataclass(frozen=True)
class ResolvedTarget:
    """The effective SSH settings of a target as printed by ``ssh -G`` (OpenSSH 9.x).

    ``port`` is an int; ``identity_files`` and ``known_hosts_files`` are expanded paths
    (``known_hosts_files`` holds the user files then the global ones).
    """

    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts_files: tuple[str, ...]
    host_key_alias: str | None = None
    proxy_command: str | None = None
    proxy_jump: str | None = None

    @property
    def known_hosts_name(self) -> str:
        """The name a host key is recorded under in known_hosts (``[host]:port`` if port != 22)."""
        name = self.host_key_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"


def _parse_ssh_G(text: str) -> ResolvedTarget:
    """Parse ``ssh -G`` output (lower-case ``key value`` lines; repeated ``identityfile``)."""
    single: dict[str, str] = {}
    identities: list[str] = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if not key:
            continue
        if key == "identityfile":
            identities.append(os.path.expanduser(value))
        else:
            single.setdefault(key, value)
    known = [os.path.expanduser(p) for p in single.get("userknownhostsfile", "").split()]
    known += [os.path.expanduser(p) for p in single.get("globalknownhostsfile", "").split()]
    none = {None, "", "none"}
    return ResolvedTarget(
        hostname=single.get("hostname", ""),
        port=int(single.get("port", "22")),
        user=single.get("user", ""),
        identity_files=tuple(identities),
        known_hosts_files=tuple(known),
        host_key_alias=None if single.get("hostkeyalias") in none else single["hostkeyalias"],
        proxy_command=None if single.get("proxycommand") in none else single["proxycommand"],
        proxy_jump=None if single.get("proxyjump") in none else single["proxyjump"],
    )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Result:
    """Outcome of one remote command.

    ``argv`` is the local ssh argv, ``command`` the remote command string, ``returncode``
    the remote exit status; ``stdout``/``stderr`` are UTF-8 text (bad bytes replaced),
    ``stdout_bytes``/``stderr_bytes`` the raw output.
    """

    argv: list[str]
    command: str
    returncode: int
    stdout_bytes: bytes = field(repr=False)
    stderr_bytes: bytes = field(repr=False)

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class LockInfo(BaseModel):
    """Content of the deploy lock file on a host (JSON).

    ``owner``: who deploys (free text, e.g. ``alice: deploy speed-8192``); ``pid`` and
    ``host``: the servedeck process and the machine it runs on (not the card host);
    ``started_at``: UTC, ISO 8601.
    """

    model_config = ConfigDict(extra="forbid")

    owner: str
    pid: int
    host: str
    started_at: _dt.datetime

    def age_h(self, now: _dt.datetime | None = None) -> float:
        """Age of the lock in hours."""
        now = now or _dt.datetime.now(_dt.timezone.utc)
        started = self.started_at
        if started.tzinfo is None:
            started = started.replace(tzinfo=_dt.timezone.utc)
        return (now - started).total_seconds() / 3600.0

    def stale_reason(self, *, max_age_h: float, now: _dt.datetime | None = None) -> str | None:
        """Why this lock looks stale, or None.

        Stale when older than ``max_age_h`` hours, or when it was taken on this machine
        (``host`` equals the local hostname) and process ``pid`` no longer exists.
        """
        age = self.age_h(now)
        if age > max_age_h:
            return f"it is {age:.1f} h old (more than {max_age_h:g} h)"
        if self.host == socket.gethostname() and not _pid_alive(self.pid):
            return f"its process {self.pid} on {self.host} (this machine) is gone"
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- host


_PREFLIGHT_SCRIPT = r"""
wd=$1; port=$2; shift 2
js() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | tr '\n\t\r' '   ' | tr -d '\000-\037')"; }
jv() { if [ -n "$1" ]; then js "$1"; else printf null; fi; }
printf '{"hostname":%s' "$(js "$(uname -n)")"
printf ',"kernel":%s' "$(js "$(uname -r)")"
printf ',"docker_server_version":%s' "$(jv "$(docker version --format '{{.Server.Version}}' 2>/dev/null)")"
printf ',"docker_api_version":%s' "$(jv "$(docker version --format '{{.Server.APIVersion}}' 2>/dev/null)")"
printf ',"compose_version":%s' "$(jv "$(docker compose version --short 2>/dev/null)")"
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
if [ -n "$port" ]; then
  hex=$(printf '%04X' "$port")
  l=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h="$hex" '$4 == "0A" { n = split($2, a, ":"); if (a[n] == h) { print "yes"; exit } }')
  printf ',"port_listening":%s' "$( [ "$l" = yes ] && echo true || echo false)"
  printf ',"port_containers":%s' "$(jv "$(docker ps --filter "publish=$port" --format '{{.Names}}' 2>/dev/null | tr '\n' ' ')")"
fi
lock=$wd/.servedeck/deploy.lock
if [ -f "$lock" ]; then printf ',"lock":%s' "$(js "$(cat "$lock")")"; fi
printf '}\n'
"""

_UPLOAD_SCRIPT = r"""
set -eu
dst=$1; keep=$2
dir=$(dirname "$dst")
mkdir -p "$dir"
tmp=$(mktemp "$dir/.servedeck-upload.XXXXXX")
trap 'rm -f "$tmp" "$tmp.keep"' EXIT
cat > "$tmp"
chmod 0644 "$tmp"
sync "$tmp" 2>/dev/null || true
got=$(sha256sum "$tmp" | cut -d' ' -f1)
[ "$got" = "$3" ] || { echo "checksum mismatch: sent $3, got $got" >&2; exit 3; }
if [ -n "$keep" ] && [ -e "$dst" ]; then
  case $keep in /*) bak=$keep ;; *) bak=$dir/$keep ;; esac
  cp -p "$dst" "$tmp.keep"
  mv -f "$tmp.keep" "$bak"
fi
mv -f "$tmp" "$dst"
"""

_LOCK_ACQUIRE_SCRIPT = r"""
set -eu
lock=$1
mkdir -p "$(dirname "$lock")"
tmp=$(mktemp "$lock.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
if ln "$tmp" "$lock" 2>/dev/null; then echo acquired; else echo held; cat "$lock" 2>/dev/null || true; fi
"""

_LOCK_RELEASE_SCRIPT = r"""
set -eu
lock=$1; expect=$2
[ -f "$lock" ] || { echo absent; exit 0; }
if [ -z "$expect" ] || [ "$(cat "$lock")" = "$expect" ]; then rm -f "$lock"; echo released; else echo other; cat "$lock"; fi
"""


class RemoteHost:
    """One card host reached over SSH.

    Args:
        name: the inventory name (``b70``), used in messages.
        ssh_target: how to reach it.
        workdir: absolute path of servedeck's working directory on the host (compose file,
            ``models/``, ``cache/``, ``.servedeck/`` state).

    Every method that runs something raises :class:`ServedeckError` when the host cannot be
    reached, its host key is unknown or changed, or (with ``check=True``) the command fails.
    """

    def __init__(self, name: str, ssh_target: SshTarget, workdir: str) -> None:
        if not workdir.startswith("/"):
            raise ServedeckError(f"host {name}: workdir must be an absolute path, got {workdir!r}",
                                 field="workdir")
        self.name = name
        self.ssh_target = ssh_target
        self.workdir = workdir.rstrip("/") or "/"
        self._resolved: ResolvedTarget | None = None
        self._held_lock: str | None = None

    def __repr__(self) -> str:
        return f"RemoteHost({self.name!r}, {self.ssh_target.destination!r}, {self.workdir!r})"

    # ------------------------------------------------------------------ paths

    @property
    def compose_path(self) -> str:
        """``<workdir>/docker-compose.yml``."""
        return f"{self.workdir}/docker-compose.yml"

    @property
    def lock_path(self) -> str:
        """``<workdir>/.servedeck/deploy.lock``."""
        return f"{self.workdir}/{STATE_DIR}/{LOCK_NAME}"

    @property
    def history_path(self) -> str:
        """``<workdir>/.servedeck/history.jsonl``."""
        return f"{self.workdir}/{STATE_DIR}/{HISTORY_NAME}"

    # ------------------------------------------------------------------ ssh

    def resolve(self) -> ResolvedTarget:
        """Effective hostname/port/user/identities/known_hosts via ``ssh -G`` (cached).

        Raises:
            ServedeckError: when ``ssh -G`` fails (bad config file, unknown option).
        """
        if self._resolved is None:
            argv = ["ssh", "-G", *self.ssh_target.ssh_options(), "--", self.ssh_target.destination]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            if proc.returncode != 0:
                raise ServedeckError(
                    f"host {self.name}: cannot resolve ssh target {self.ssh_target.destination!r}: "
                    f"{proc.stderr.strip()}", file=self.ssh_target.ssh_config)
            self._resolved = _parse_ssh_G(proc.stdout)
        return self._resolved

    def _ssh_argv(self, command: str) -> list[str]:
        return ["ssh", "-T", *self.ssh_target.ssh_options(), "--", self.ssh_target.destination,
                command]

    def run(self, cmd: list[str] | str, *, check: bool = True, input: bytes | None = None,
            timeout: float | None = DEFAULT_TIMEOUT_S) -> Result:
        """Run a command on the host and wait for it.

        Args:
            cmd: an argv list (quoted with :func:`shlex.join`) or a shell command string
                (run by the remote user's shell as is).
            check: raise when the remote command exits non-zero.
            input: bytes fed to the command's stdin (none: stdin is empty).
            timeout: seconds before the local ssh is killed (None: wait forever).

        Returns:
            :class:`Result` with the remote exit status and output.

        Raises:
            ServedeckError: unknown/changed host key (with the fingerprint and how to trust
                it), connection or authentication failure, timeout, or a non-zero exit with
                ``check=True`` (message carries the exit status and stderr tail).
        """
        command = shlex.join(cmd) if isinstance(cmd, list) else cmd
        argv = self._ssh_argv(command)
        try:
            proc = subprocess.run(argv, input=input if input is not None else b"",
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise ServedeckError(
                f"host {self.name}: command timed out after {timeout:g} s: {_short(command)}",
                hint="the host may be slow or hung; retry with a longer timeout") from exc
        result = Result(argv, command, proc.returncode, proc.stdout, proc.stderr)
        if proc.returncode == 255:
            self._raise_for_ssh_failure(result)
        if check and proc.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise ServedeckError(
                f"host {self.name}: command failed with exit status {proc.returncode}: "
                f"{_short(command)}" + (f"\n{tail}" if tail else ""))
        return result

    def _raise_for_ssh_failure(self, result: Result) -> None:
        err = result.stderr
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in err:
            t = self.resolve()
            files = " ".join(f for f in t.known_hosts_files if f != "/dev/null")
            raise ServedeckError(
                f"host {self.name}: the SSH host key of {t.known_hosts_name} has CHANGED since it "
                f"was recorded in {files}; refusing to connect (possible man-in-the-middle, or the "
                f"host was reinstalled). Offered key: {self._fingerprint_text(t)}",
                hint=f"if the change is expected, verify the new fingerprint out of band, then: "
                     f"ssh-keygen -R '{t.known_hosts_name}' -f {_first_file(t)} && "
                     f"ssh-keyscan -p {t.port} {t.hostname} >> {_first_file(t)}")
        if "Host key verification failed" in err:
            t = self.resolve()
            raise ServedeckError(
                f"host {self.name}: the SSH host key of {t.known_hosts_name} is not known "
                f"(not in {_first_file(t)}); servedeck never trusts a host on first contact. "
                f"The host offers: {self._fingerprint_text(t)}",
                hint=f"check that fingerprint out of band (on the host: ssh-keygen -lf "
                     f"/etc/ssh/ssh_host_ed25519_key.pub), then trust it: "
                     f"ssh-keyscan -p {t.port} {t.hostname} >> {_first_file(t)}")
        if _looks_like_ssh_error(err):
            raise ServedeckError(
                f"host {self.name}: cannot connect over SSH to {self.ssh_target.destination}: "
                f"{err.strip()}",
                hint="check the host is up, the ssh target in the inventory, and that "
                     f"`ssh {shlex.join(self.ssh_target.ssh_options())} "
                     f"{self.ssh_target.destination} true` works")

    def _fingerprint_text(self, t: ResolvedTarget) -> str:
        """Fingerprints (SHA256) of the keys the host offers now, via ssh-keyscan + ssh-keygen."""
        try:
            scan = subprocess.run(["ssh-keyscan", "-T", "5", "-p", str(t.port), t.hostname],
                                  capture_output=True, timeout=15)
            fps = subprocess.run(["ssh-keygen", "-lf", "-"], input=scan.stdout,
                                 capture_output=True, timeout=15)
            lines = [ln for ln in fps.stdout.decode().splitlines() if ln.strip()]
        except (OSError, subprocess.TimeoutExpired):
            lines = []
        return "; ".join(lines) if lines else "(ssh-keyscan got no key)"

    def run_script(self, script: str, args: list[str] | tuple[str, ...] = (), *,
                   check: bool = True, input: bytes | None = None,
                   timeout: float | None = DEFAULT_TIMEOUT_S) -> Result:
        """Run a POSIX ``sh`` script on the host with positional ``args`` ($1, $2, ...).

        Same errors as :meth:`run`.
        """
        return self.run(["sh", "-c", script, "sh", *args], check=check, input=input,
                        timeout=timeout)

    # ------------------------------------------------------------------ files

    def upload_atomic(self, remote_path: str, data: bytes, keep_previous: str | None = None,
                      *, timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        """Write ``data`` to ``remote_path`` atomically; return its SHA-256 (hex).

        The bytes go to a temp file in the same directory (mode 0644), are checked against
        the local SHA-256, then renamed over ``remote_path``: a reader sees the old or the
        new file, never a partial one. Relative paths are under the workdir.

        Args:
            keep_previous: if set and a file exists at ``remote_path``, it is first copied to
                this name (a file name in the same directory, or an absolute path),
                replacing an older backup.

        Raises:
            ServedeckError: the transfer failed or the bytes on the host differ (the
                previous file is then left untouched).
        """
        path = self.abspath(remote_path)
        digest = hashlib.sha256(data).hexdigest()
        # the script compares the checksum before the rename
        self.run_script(_UPLOAD_SCRIPT, [path, keep_previous or "", digest], input=data,
                        timeout=timeout)
        return digest

    def read_file(self, remote_path: str, *, missing_ok: bool = False) -> bytes | None:
        """Bytes of a file on the host (relative paths are under the workdir).

        Returns None when it does not exist and ``missing_ok``.

        Raises:
            ServedeckError: it does not exist (unless ``missing_ok``) or cannot be read.
        """
        path = self.abspath(remote_path)
        res = self.run_script('if [ -e "$1" ]; then exec cat -- "$1"; else exit 44; fi', [path],
                              check=False)
        if res.returncode == 44:
            if missing_ok:
                return None
            raise ServedeckError(f"host {self.name}: {path} does not exist")
        if res.returncode != 0:
            raise ServedeckError(f"host {self.name}: cannot read {path}: {res.stderr.strip()}")
        return res.stdout_bytes

    def read_files(self, remote_paths: list[str]) -> dict[str, bytes | None]:
        """Several files in ONE round trip: ``{given path: bytes, or None when missing}``.

        Raises:
            ServedeckError: the host is unreachable or a file exists but cannot be read.
        """
        script = ('for f in "$@"; do if [ -e "$f" ]; then printf "1 "; base64 -w0 -- "$f" || exit 5; '
                  'else printf "0 "; fi; echo; done')
        res = self.run_script(script, [self.abspath(p) for p in remote_paths])
        lines = res.stdout.splitlines()
        if len(lines) != len(remote_paths):
            raise ServedeckError(f"host {self.name}: reading {remote_paths} returned {len(lines)} lines")
        out: dict[str, bytes | None] = {}
        for path, line in zip(remote_paths, lines):
            flag, _, data = line.partition(" ")
            out[path] = base64.b64decode(data) if flag == "1" else None
        return out

    def abspath(self, remote_path: str) -> str:
        """``remote_path`` if absolute, else ``<workdir>/<remote_path>``."""
        return remote_path if remote_path.startswith("/") else f"{self.workdir}/{remote_path}"

    # ------------------------------------------------------------------ docker

    def compose(self, args: list[str], *, check: bool = True,
                timeout: float | None = 900.0) -> Result:
        """Run ``docker compose -f <workdir>/docker-compose.yml --project-directory <workdir>
        <args...>`` on the host (Compose v2 CLI plugin). Same errors as :meth:`run`."""
        return self.run(["docker", "compose", "-f", self.compose_path,
                         "--project-directory", self.workdir, *args],
                        check=check, timeout=timeout)

    def docker_client(self, *, timeout: int = 120, verified: bool = False):
        """A ``docker.DockerClient`` talking to the host's dockerd over SSH (paramiko).

        The target is resolved with ``ssh -G``; host keys come from the resolved known_hosts
        files only and unknown or changed keys are refused (``RejectPolicy``). The API
        version is negotiated with the server. Call ``.close()`` when done.

        Raises:
            ServedeckError: unknown/changed host key, connection or authentication failure.
        """
        import docker
        import paramiko
        from docker.transport.sshconn import SSHHTTPAdapter

        if not verified:  # the caller has not talked to the host through OpenSSH yet
            self.run(["true"])  # verifies the host key with OpenSSH first (clear error + fingerprint)
        t = self.resolve()
        client = paramiko.SSHClient()
        host_keys = client.get_host_keys()
        for path in t.known_hosts_files:
            if os.path.isfile(path):
                host_keys.load(path)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        params: dict[str, Any] = {
            "hostname": t.hostname, "port": t.port, "username": t.user or None,
            "key_filename": [p for p in t.identity_files if os.path.isfile(p)] or None,
            "look_for_keys": False, "timeout": 15,
        }
        if t.proxy_command:
            params["sock"] = paramiko.ProxyCommand(t.proxy_command)
        elif t.proxy_jump:
            cfg = ["-F", self.ssh_target.ssh_config] if self.ssh_target.ssh_config else []
            params["sock"] = paramiko.ProxyCommand(shlex.join(
                ["ssh", *cfg, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                 "-W", f"{t.hostname}:{t.port}", t.proxy_jump]))

        class _Adapter(SSHHTTPAdapter):
            def _create_paramiko_client(self, base_url: str) -> None:
                self.ssh_client = client
                self.ssh_params = params

        try:
            adapter = _Adapter("ssh://servedeck", timeout=timeout)
        except paramiko.BadHostKeyException as exc:
            raise ServedeckError(
                f"host {self.name}: the SSH host key of {t.known_hosts_name} has CHANGED",
                hint=f"verify it, then update {_first_file(t)}") from exc
        except (paramiko.SSHException, OSError) as exc:
            raise ServedeckError(
                f"host {self.name}: docker over SSH cannot connect to "
                f"{t.user}@{t.hostname}:{t.port}: {exc}") from exc
        from docker.constants import MINIMUM_DOCKER_API_VERSION
        dc = docker.DockerClient(base_url="ssh://servedeck", use_ssh_client=True,
                                 version=MINIMUM_DOCKER_API_VERSION, timeout=timeout)
        api = dc.api
        api._custom_adapter.close()
        api._custom_adapter = adapter
        api.mount("http+docker://ssh", adapter)
        try:
            api._version = api._retrieve_server_version()
        except docker.errors.DockerException as exc:
            dc.close()
            raise ServedeckError(f"host {self.name}: docker over SSH does not answer: {exc}",
                                 hint="is dockerd running on the host, and `docker` on the "
                                      "PATH of the SSH user (it runs `docker system dial-stdio`)?"
                                 ) from exc
        return dc

    # ------------------------------------------------------------------ facts

    def preflight_facts(self, paths: list[str] | tuple[str, ...] = (),
                        port: int | None = None) -> dict[str, Any]:
        """Gather host facts in ONE SSH round trip (a POSIX sh script printing JSON).

        Args:
            paths: paths to check (relative ones are under the workdir).
            port: a TCP port to check for a listener.

        Returns:
            ``{"host": name, "hostname": str, "kernel": str (uname -r),
            "docker_server_version": str|None, "docker_api_version": str|None,
            "compose_version": str|None,
            "dri_devices": [{"path": "/dev/dri/renderD128", "gid": 992, "group": "render",
            "mode": "660"}],
            "gpu_power_caps": [{"path": ".../hwmon/hwmonN/power1_cap", "cap_w": 250.0,
            "cap_max_w": float|None}]   (sysfs hwmon, microwatts → W),
            "workdir": {"path": str, "exists": bool, "free_gib": float|None}  (df of the
            workdir or its nearest existing parent),
            "paths": {given: {"path": absolute, "exists": bool, "nonempty": bool,
            "kind": "dir"|"file"|"other"|None}},
            "port": {"port": int, "listening": bool, "containers": [names publishing it]}
            or None,
            "lock": LockInfo as dict (JSON types) | {"raw": str} if unparsable | None}``

        Raises:
            ServedeckError: the host is unreachable or the script output is not JSON.
        """
        args = [self.workdir, "" if port is None else str(int(port)), *paths]
        res = self.run_script(_PREFLIGHT_SCRIPT, args, timeout=60)
        try:
            raw = json.loads(res.stdout)
        except json.JSONDecodeError as exc:
            raise ServedeckError(f"host {self.name}: preflight output is not JSON: {exc}: "
                                 f"{_short(res.stdout)}") from exc
        facts: dict[str, Any] = {
            "host": self.name,
            "hostname": raw["hostname"],
            "kernel": raw["kernel"],
            "docker_server_version": raw["docker_server_version"],
            "docker_api_version": raw["docker_api_version"],
            "compose_version": raw["compose_version"],
            "dri_devices": [{"path": p, "gid": int(g), "group": grp, "mode": m}
                            for p, g, grp, m in raw["dri"]],
            "gpu_power_caps": [{"path": p, "cap_w": _uw_to_w(c), "cap_max_w": _uw_to_w(m)}
                               for p, c, m in raw["power"]],
            "workdir": {"path": self.workdir, "exists": raw["workdir_exists"],
                        "free_gib": (round(int(raw["workdir_avail_kib"]) / 1024**2, 2)
                                     if raw["workdir_avail_kib"] else None)},
            "paths": {given: {"path": a, "exists": kind is not None, "nonempty": nonempty,
                              "kind": kind}
                      for given, a, kind, nonempty in raw["paths"]},
            "port": None,
            "lock": None,
        }
        if port is not None:
            facts["port"] = {"port": int(port), "listening": raw["port_listening"],
                             "containers": (raw["port_containers"] or "").split()}
        if "lock" in raw:
            try:
                facts["lock"] = LockInfo.model_validate_json(raw["lock"]).model_dump(mode="json")
            except ValueError:
                facts["lock"] = {"raw": raw["lock"]}
        return facts

    # ------------------------------------------------------------------ lock

    def read_lock(self) -> LockInfo | None:
        """The deploy lock on the host, or None when free.

        Raises:
            ServedeckError: the lock file exists but is not valid lock JSON (hint: force_unlock).
        """
        data = self.read_file(self.lock_path, missing_ok=True)
        if data is None:
            return None
        return self.parse_lock(data)

    def parse_lock(self, data: bytes) -> LockInfo:
        """Lock file content → :class:`LockInfo` (same errors as :meth:`read_lock`)."""
        try:
            return LockInfo.model_validate_json(data)
        except ValueError as exc:
            raise ServedeckError(f"host {self.name}: deploy lock {self.lock_path} is not valid: "
                                 f"{_short(data.decode('utf-8', 'replace'))}",
                                 hint="inspect it, then force-unlock") from exc

    def acquire_lock(self, owner: str, *, stale_after_h: float = 12.0) -> LockInfo:
        """Take the host's deploy lock ``<workdir>/.servedeck/deploy.lock``.

        Creation is atomic (``ln`` of a fully written temp file: fails if the lock exists).
        Content: ``{"owner", "pid", "host", "started_at"}`` (this process, this machine, UTC).

        Raises:
            ServedeckError: the lock is held; the message names owner, pid, host and start
                time, and says whether it looks stale (older than ``stale_after_h`` hours, or
                its process on this machine is gone) with a hint to force-unlock.
        """
        info = LockInfo(owner=owner, pid=os.getpid(), host=socket.gethostname(),
                        started_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0))
        payload = info.model_dump_json().encode()
        res = self.run_script(_LOCK_ACQUIRE_SCRIPT, [self.lock_path], input=payload)
        status, _, rest = res.stdout.partition("\n")
        if status.strip() == "acquired":
            self._held_lock = payload.decode()
            return info
        held = self.parse_lock(rest.encode()) if rest.strip() else None
        if held is None:
            raise ServedeckError(f"host {self.name}: deploy lock {self.lock_path} is held "
                                 "(content not readable yet); retry")
        stale = held.stale_reason(max_age_h=stale_after_h)
        msg = (f"host {self.name} is locked by {held.owner!r} (pid {held.pid} on {held.host}) "
               f"since {held.started_at.isoformat()}")
        if stale:
            raise ServedeckError(f"{msg}; the lock looks stale: {stale}",
                                 hint="if no deploy is running, force-unlock the host")
        raise ServedeckError(msg, hint="wait for that deploy to finish; if it died, "
                                       "force-unlock the host")

    def release_lock(self) -> None:
        """Release the lock taken by :meth:`acquire_lock` on this object.

        Raises:
            ServedeckError: this object holds no lock, or the lock on the host is no longer
                ours (someone force-unlocked and re-locked); the other lock is left alone.
        """
        if self._held_lock is None:
            raise ServedeckError(f"host {self.name}: release_lock without holding the lock")
        res = self.run_script(_LOCK_RELEASE_SCRIPT, [self.lock_path, self._held_lock])
        status, _, rest = res.stdout.partition("\n")
        self._held_lock = None
        if status.strip() == "other":
            raise ServedeckError(f"host {self.name}: the deploy lock is no longer ours, left "
                                 f"in place: {rest.strip()}")

    def force_unlock(self) -> LockInfo | None:
        """Remove the deploy lock whoever holds it; return what it held (None if free)."""
        data = self.read_file(self.lock_path, missing_ok=True)
        self.run(["rm", "-f", self.lock_path])
        if self._held_lock is not None:
            self._held_lock = None
        if data is None:
            return None
        try:
            return LockInfo.model_validate_json(data)
        except ValueError:
            return None

    # ------------------------------------------------------------------ history

    def append_history(self, line: dict[str, Any]) -> None:
        """Append ``line`` as one JSON line to ``<workdir>/.servedeck/history.jsonl``.

        One ``>>`` append (O_APPEND) of a single line, so concurrent appends do not
        interleave. Values must be JSON-serialisable.
        """
        payload = (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        self.run_script('set -eu; mkdir -p "$(dirname "$1")"; cat >> "$1"', [self.history_path],
                        input=payload)


# --------------------------------------------------------------------------- helpers


def _uw_to_w(value: str | None) -> float | None:
    if value is None or not str(value).strip().lstrip("-").isdigit():
        return None
    return int(value) / 1e6


def _short(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _first_file(t: ResolvedTarget) -> str:
    files = [f for f in t.known_hosts_files if f != "/dev/null"]
    return files[0] if files else "~/.ssh/known_hosts"


def _looks_like_ssh_error(stderr: str) -> bool:
    markers = ("ssh: ", "Permission denied (", "Connection refused", "Connection timed out",
               "Could not resolve hostname", "Connection closed by", "kex_exchange_identification",
               "No route to host", "Bad configuration option", "Connection reset")
    return any(m in stderr for m in markers)
