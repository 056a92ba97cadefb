"""SSH transport to a card host: the system OpenSSH client, one host-key policy, one shared
connection.

Commands run through the **system OpenSSH client** (``ssh``), not paramiko: the user's
``~/.ssh/config`` or a given ``ssh_config`` file then works exactly as it does by hand
(aliases, ``ProxyJump``, agents, certificates, hashed ``known_hosts``), and host-key checking
is OpenSSH's own. servedeck always adds ``-o StrictHostKeyChecking=yes -o BatchMode=yes``
(command-line options win over config files), so an unknown or changed host key is never
accepted silently; it becomes a :class:`~servedeck.errors.ServedeckError` that prints the
fingerprint and the command to trust it.

Every command of one servedeck process rides on one authenticated connection (OpenSSH
connection sharing, ``ControlMaster``); the Docker Engine API is reached through the same
connection by forwarding a local Unix socket to the host's ``/var/run/docker.sock``
(:meth:`SshTransport.forward_unix_socket`, OpenSSH ``-O forward -L``), so Docker traffic has
exactly the same trust settings as the commands. When a shared connection stops answering
(frozen or dropped), :meth:`SshTransport.reconnect` moves to a fresh one.

Each SSH session starts the remote user's login shell, which reads its start-up files
(``~/.bashrc`` for bash run by sshd) before it runs anything: on a host whose ``.bashrc``
initialises a toolchain that alone can cost a tenth of a second per command. So commands run,
one after another, in one **remote session** (:class:`_Session`): a POSIX ``sh`` loop started
once over the shared connection, reading one request line per command (base64 of the command
text and of its stdin), running the command with the user's login shell (``$SHELL FILE``)
with stdin, stdout and stderr on files in a private temporary directory, then answering with
one header line (a per-session nonce, the exit status, the two output sizes) and the output.
The command sees what it would see in a session of its own (the login shell and its
environment, its own stdin and outputs), except that the session returns when the command
exits, not when the last process it left in the background closes its output. A command that
times out or is interrupted ends the session, and the next command starts a fresh one. A
command with a large stdin (over :data:`SESSION_MAX_INPUT` bytes), a second thread's command
while the session is busy, every command on a host whose temporary directory is full, and
``$SERVEDECK_SSH_SESSION=0`` use an SSH session of their own instead.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import select
import shlex
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

from servedeck.errors import ServedeckError
from servedeck.model.ssh_target import SshTarget  # the inventory's data; also known by this module's name

DEFAULT_TIMEOUT_S = 120.0
"""Default timeout of one SSH command, seconds."""

CONNECT_TIMEOUT_S = 10.0
"""OpenSSH ``ConnectTimeout``: seconds to establish a new connection."""

SESSION_ENV = "SERVEDECK_SSH_SESSION"
"""Environment variable: ``0`` runs every command in an SSH session of its own."""

SESSION_MAX_INPUT = 64 * 1024
"""Bytes of stdin up to which a command goes through the remote session (the loop reads its
request line byte by byte, as POSIX ``read`` does on a pipe); a larger stdin gets a session of
its own."""


class HostUnreachable(ServedeckError):
    """The host could not be reached over SSH (connection refused, timed out, dropped, or a
    command did not answer within its timeout). Host-key refusals are plain
    :class:`ServedeckError`: they are not transport faults and must not be retried."""


# --------------------------------------------------------------------------- targets


def ssh_options(target: SshTarget) -> list[str]:
    """OpenSSH options (argv before the destination) for ``target``
    (:class:`servedeck.model.ssh_target.SshTarget`).

    Always includes ``StrictHostKeyChecking=yes`` and ``BatchMode=yes`` (the one
    host-key policy of every connection servedeck makes, commands and Docker alike),
    a connect timeout and keep-alives (a dead connection is noticed within ~15 s).
    """
    opts: list[str] = []
    if target.ssh_config:
        opts += ["-F", os.path.expanduser(target.ssh_config)]
    if target.port is not None:
        opts += ["-p", str(target.port)]
    if target.user:
        opts += ["-l", target.user]
    if target.identity_file:
        opts += ["-i", os.path.expanduser(target.identity_file), "-o", "IdentitiesOnly=yes"]
    if target.known_hosts:
        opts += ["-o", f"UserKnownHostsFile={os.path.expanduser(target.known_hosts)}"]
    opts += ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
             "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S:g}",
             "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    return opts


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


def parse_ssh_G(text: str) -> ResolvedTarget:
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


# --------------------------------------------------------------------------- transport


class SshTransport:
    """Runs commands on one host through the system ``ssh`` over a shared connection.

    Args:
        name: the inventory name of the host (messages only).
        target: how to reach it.

    The shared connection's control socket lives in ``/tmp/servedeck-ssh-<uid>/``; its name
    includes a hash of the target *and of the trust settings* (ssh config, known_hosts,
    identity), so a command with other trust settings never rides on a connection whose host
    key was checked against a different known_hosts. ``$SERVEDECK_SSH_MULTIPLEX=0`` turns
    sharing off (Docker then gets its own forwarding connection).
    """

    def __init__(self, name: str, target: SshTarget) -> None:
        self.name = name
        self.target = target
        self._resolved: ResolvedTarget | None = None
        self._generation = ""  # changes on reconnect(): a new control socket, a new master
        self._session: _Session | None = None
        self._session_lock = threading.Lock()
        self._session_off = os.environ.get(SESSION_ENV, "1") == "0"
        self._opener: threading.Thread | None = None
        self._open_error: ServedeckError | None = None

    # ------------------------------------------------------------------ options

    @property
    def multiplexed(self) -> bool:
        return os.environ.get("SERVEDECK_SSH_MULTIPLEX", "1") != "0"

    def control_path(self) -> str:
        """Path of the control socket of the shared connection (no ``%`` tokens)."""
        base = f"/tmp/servedeck-ssh-{os.getuid()}"
        os.makedirs(base, mode=0o700, exist_ok=True)
        key = hashlib.sha256("\0".join([self.target.destination, *ssh_options(self.target)])
                             .encode()).hexdigest()[:20]
        return f"{base}/{key}{self._generation}"

    def options(self) -> list[str]:
        """The ssh options of every call: trust settings, then connection sharing."""
        opts = ssh_options(self.target)
        if self.multiplexed:
            opts += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path()}",
                     "-o", "ControlPersist=60"]
        return opts

    def argv(self, command: str) -> list[str]:
        """The local argv running ``command`` (a remote shell command string) on the host."""
        return ["ssh", "-T", *self.options(), "--", self.target.destination, command]

    def reconnect(self) -> None:
        """Stop using the current shared connection (it may be frozen) and open a fresh one on
        the next call.

        The old master is asked, in the background (it may not answer), to stop taking new
        sessions (``ssh -O stop``), not to exit: other users of the same connection (another
        servedeck command, a thread of this one opening its session) ride on it, and an exit
        would end their commands mid-way (ssh 255, nothing on stderr). It ends by itself once
        its last session closes, over a frozen link within ``ServerAliveInterval`` x
        ``ServerAliveCountMax`` (15 s)."""
        if self.multiplexed:
            old = self.control_path()

            def _stop() -> None:
                try:
                    subprocess.run(["ssh", "-o", f"ControlPath={old}", "-O", "stop",
                                    self.target.destination], capture_output=True, timeout=5)
                except subprocess.TimeoutExpired:
                    pass

            threading.Thread(target=_stop, daemon=True).start()
        self._generation = "-" + uuid.uuid4().hex[:6]
        if self._session_lock.acquire(blocking=False):
            try:
                self._drop_session()
            finally:
                self._session_lock.release()
        elif self._session is not None:
            self._session.stale = True  # the thread using it drops it when its command ends

    def abort_session(self) -> None:
        """Kill the remote session's local ``ssh`` (from any thread): a command blocked on it
        (a frozen session or connection) returns at once with :class:`HostUnreachable`, and the
        next command opens a fresh session. What the command started on the host runs on."""
        session = self._session
        proc = session.proc if session is not None else None
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        if session is not None:
            session.stale = True
            # with connection sharing the master holds the session's pipes (OpenSSH passes them
            # on): killing ssh need not end them, so the waiting command is told as well
            session.aborted = True

    def open_session(self, timeout: float | None = 30.0) -> None:
        """Start the remote session now (e.g. in a thread while the caller imports and
        renders), so that the first command does not wait for the login shell.

        Raises:
            HostUnreachable / ServedeckError: as :meth:`run` (unknown host key, no connection).
        """
        if self._session_off:
            return
        with self._session_lock:
            self._ensure_session(timeout)

    def open_session_soon(self) -> None:
        """:meth:`open_session` in a background thread: the next command waits for it, and
        gets the error it met (unknown host key, no connection) raised in its place."""
        if self._session_off or self._opener is not None:
            return

        def _open() -> None:
            try:
                self.open_session()
            except ServedeckError as exc:
                self._open_error = exc

        self._opener = threading.Thread(target=_open, daemon=True, name="servedeck-ssh-session")
        self._opener.start()

    def close(self) -> None:
        """End the remote session (its loop sees end of input); the shared connection persists."""
        with self._session_lock:
            self._drop_session()

    def _drop_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _ensure_session(self, timeout: float | None) -> "_Session | None":
        """The running session (started if needed), or None when this host cannot run one
        (the loop's tools are missing there): then every command gets its own session."""
        if self._open_error is not None:
            error, self._open_error = self._open_error, None
            raise error
        if self._session is not None and (self._session.stale or not self._session.alive()):
            self._drop_session()
        if self._session is None and not self._session_off:
            session = self._start_session(timeout)
            if session is None:
                return None
            self._session = session
            atexit.register(session.close)
        return self._session

    def _start_session(self, timeout: float | None, *, again: bool = True) -> "_Session | None":
        """A started session, or None when this host cannot run one (then ``_session_off``).

        An ssh that ends with status 255 and not a word before the loop's banner met a shared
        connection whose master went away as the session started (another user's ``-O stop``
        or ``-O exit``, its ``ControlPersist`` running out: OpenSSH's mux client logs "Control
        master terminated unexpectedly" at debug level only, mux.c); nothing ran on the host
        yet, so the start is tried once more (a fresh master).

        Raises:
            HostUnreachable / ServedeckError: as :meth:`run`.
        """
        nonce = uuid.uuid4().hex
        session = _Session(self.argv(shlex.join(["exec", "sh", "-c", _SESSION_LOOP, "sh", nonce])), nonce)
        try:
            session.start(timeout)
        except _SessionFailed as exc:
            if exc.returncode == 255 and again and not exc.stderr.strip():
                return self._start_session(timeout, again=False)
            if exc.returncode == 255:
                self._raise_for_ssh_failure(Result(session.argv, "(remote session)", 255, b"", exc.stderr))
                raise HostUnreachable(f"host {self.name}: the SSH session closed: "
                                      f"{exc.stderr.decode('utf-8', 'replace').strip()}") from None
            self._session_off = True  # e.g. no base64 or mktemp on the host
            return None
        except TimeoutError:
            raise HostUnreachable(f"host {self.name}: no SSH session within {timeout:g} s",
                                  hint="the host or the connection to it may be slow or hung") from None
        return session

    def master_pid(self) -> int | None:
        """PID of the running shared connection's ``ssh`` master, or None (``ssh -O check``)."""
        if not self.multiplexed:
            return None
        try:
            proc = subprocess.run(["ssh", "-o", f"ControlPath={self.control_path()}", "-O", "check",
                                   self.target.destination], capture_output=True, text=True,
                                  timeout=5)
        except subprocess.TimeoutExpired:
            return None
        text = proc.stderr + proc.stdout
        if "pid=" not in text:
            return None
        return int(text.split("pid=", 1)[1].split(")", 1)[0])

    # ------------------------------------------------------------------ resolve

    def resolve(self) -> ResolvedTarget:
        """Effective hostname/port/user/identities/known_hosts via ``ssh -G`` (cached).

        Raises:
            ServedeckError: when ``ssh -G`` fails (bad config file, unknown option).
        """
        if self._resolved is None:
            argv = ["ssh", "-G", *ssh_options(self.target), "--", self.target.destination]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            if proc.returncode != 0:
                raise ServedeckError(
                    f"host {self.name}: cannot resolve ssh target {self.target.destination!r}: "
                    f"{proc.stderr.strip()}", file=self.target.ssh_config)
            self._resolved = parse_ssh_G(proc.stdout)
        return self._resolved

    # ------------------------------------------------------------------ run

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
            HostUnreachable: connection failure, dropped connection or timeout.
            ServedeckError: unknown/changed host key (with the fingerprint and how to trust
                it), authentication failure, or a non-zero exit with ``check=True`` (message
                carries the exit status and stderr tail).
        """
        command = shlex.join(cmd) if isinstance(cmd, list) else cmd
        data = input if input is not None else b""
        opener = self._opener
        if opener is not None:
            opener.join(timeout)
        if not self._session_off and len(data) <= SESSION_MAX_INPUT and self._session_lock.acquire(blocking=False):
            try:
                result = self._run_in_session(self.argv(command), command, data, timeout)
            finally:
                self._session_lock.release()
            if result is not None:
                return self._checked(result, check)
        return self.run_alone(command, check=check, input=input, timeout=timeout)

    def run_alone(self, cmd: list[str] | str, *, check: bool = True, input: bytes | None = None,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> Result:
        """:meth:`run` in an SSH session of its own (a new login shell), not the remote session.

        Same arguments, result and errors as :meth:`run`.
        """
        command = shlex.join(cmd) if isinstance(cmd, list) else cmd
        argv = self.argv(command)
        try:
            proc = subprocess.run(argv, input=input if input is not None else b"",
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise self._timed_out(command, timeout) from exc
        result = Result(argv, command, proc.returncode, proc.stdout, proc.stderr)
        if proc.returncode == 255:
            self._raise_for_ssh_failure(result)
        return self._checked(result, check)

    def _timed_out(self, command: str, timeout: float | None) -> HostUnreachable:
        return HostUnreachable(f"host {self.name}: command timed out after {timeout:g} s: {_short(command)}",
                               hint="the host or the connection to it may be slow or hung")

    def _checked(self, result: Result, check: bool) -> Result:
        if check and result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise ServedeckError(
                f"host {self.name}: command failed with exit status {result.returncode}: "
                f"{_short(result.command)}" + (f"\n{tail}" if tail else ""))
        return result

    def _run_in_session(self, argv: list[str], command: str, data: bytes,
                        timeout: float | None) -> Result | None:
        """``command`` in the remote session (the caller holds the session lock); None when
        this host runs no session, or the command could not be sent (no space on the host for
        it): then the caller runs it alone. A timeout or a dropped connection ends the session.

        Unlike a session of its own, a command's exit status 255 and its death by a signal
        (128 + N) come back as its status, not as an SSH failure.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        session = self._ensure_session(timeout)
        if session is None:
            return None
        try:
            rc, out, err = session.call(command, data, deadline)
        except TimeoutError:
            self._drop_session()
            raise self._timed_out(command, timeout) from None
        except _SessionTmpFull as exc:
            self._drop_session()
            self._session_off = True  # from now on each command in a session of its own
            if not exc.ran:
                return None  # it did not run: the caller runs it alone
            raise ServedeckError(
                f"host {self.name}: the temporary directory of servedeck's session on the host is "
                f"full, so the output of this command was lost (the command itself ran): "
                f"{_short(command)}",
                hint="free space in the host's $TMPDIR (df -h /tmp), then check the host's state "
                     f"(invoke status --host {self.name})") from None
        except _SessionFailed as exc:
            self._drop_session()
            raise HostUnreachable(
                f"host {self.name}: the connection closed while running {_short(command)}: "
                f"{exc.stderr.decode('utf-8', 'replace').strip() or 'no message'}",
                hint="check the host is up; the next command opens a fresh session") from None
        except BaseException:
            # interrupted (Ctrl-C, SIGTERM) with the answer still to come: the session can never
            # be read in step again. Ending it ends the command's connection, as killing its own
            # ssh did.
            self._drop_session()
            raise
        if session.stale:
            self._drop_session()
        return Result(argv, command, rc, out, err)

    def run_script(self, script: str, args: list[str] | tuple[str, ...] = (), *,
                   check: bool = True, input: bytes | None = None,
                   timeout: float | None = DEFAULT_TIMEOUT_S) -> Result:
        """Run a POSIX ``sh`` script on the host with positional ``args`` ($1, $2, ...).

        Same errors as :meth:`run`.
        """
        return self.run(["sh", "-c", script, "sh", *args], check=check, input=input,
                        timeout=timeout)

    def forward_unix_socket(self, local: str, remote: str, *, timeout: float = 15.0) -> None:
        """Forward the local Unix socket ``local`` to ``remote`` on the host, over the shared
        connection (``ssh -O forward -L local:remote``); the master is opened if needed.

        Raises:
            HostUnreachable / ServedeckError: as :meth:`run`.
        """
        if not self.multiplexed:
            raise ServedeckError("socket forwarding needs SSH connection sharing "
                                 "($SERVEDECK_SSH_MULTIPLEX=0 is set)")
        if self.master_pid() is None:
            self.run(["true"], timeout=timeout)
        argv = ["ssh", *self.options(), "-O", "forward", "-L", f"{local}:{remote}",
                "--", self.target.destination]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise HostUnreachable(f"host {self.name}: forwarding the Docker socket timed out "
                                  f"after {timeout:g} s") from exc
        if proc.returncode != 0:
            raise HostUnreachable(f"host {self.name}: cannot forward {remote} over SSH: "
                                  f"{proc.stderr.decode('utf-8', 'replace').strip()}")

    def cancel_forward(self, local: str, remote: str) -> None:
        """Undo :meth:`forward_unix_socket` (best effort) and remove the local socket file."""
        try:
            subprocess.run(["ssh", *self.options(), "-O", "cancel", "-L", f"{local}:{remote}",
                            "--", self.target.destination], capture_output=True, timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.unlink(local)
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ errors

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
                     f"ssh-keygen -R '{t.known_hosts_name}' -f {first_known_hosts(t)} && "
                     f"ssh-keyscan -p {t.port} {t.hostname} >> {first_known_hosts(t)}")
        if "Host key verification failed" in err:
            t = self.resolve()
            raise ServedeckError(
                f"host {self.name}: the SSH host key of {t.known_hosts_name} is not known "
                f"(not in {first_known_hosts(t)}); servedeck never trusts a host on first contact. "
                f"The host offers: {self._fingerprint_text(t)}",
                hint=f"check that fingerprint out of band (on the host: ssh-keygen -lf "
                     f"/etc/ssh/ssh_host_ed25519_key.pub), then trust it: "
                     f"ssh-keyscan -p {t.port} {t.hostname} >> {first_known_hosts(t)}")
        if "Permission denied (" in err:
            raise ServedeckError(f"host {self.name}: SSH authentication failed: {err.strip()}")
        if _looks_like_ssh_error(err) or not err.strip():
            raise HostUnreachable(
                f"host {self.name}: cannot connect over SSH to {self.target.destination}: "
                f"{err.strip() or 'the connection closed'}",
                hint="check the host is up, the ssh target in the inventory, and that "
                     f"`ssh {shlex.join(ssh_options(self.target))} "
                     f"{self.target.destination} true` works")

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


# --------------------------------------------------------------------------- the remote session

_SESSION_LOOP = r"""
command -v base64 >/dev/null 2>&1 || exit 96
d=$(mktemp -d "${TMPDIR:-/tmp}/servedeck-session.XXXXXX") || exit 97
trap 'rm -rf "$d"' EXIT
trap 'exit 129' HUP
trap 'exit 141' PIPE
trap 'exit 143' TERM
nonce=$1
printf '%s ready\n' "$nonce"
while IFS= read -r line; do
  set -f; set -- $line; set +f
  rm -f "$d/c" "$d/i" "$d/o" "$d/e"
  if ! { printf '%s' "${1#x}" | base64 -d > "$d/c" && printf '%s' "${2#x}" | base64 -d > "$d/i"; }; then
    printf '%s unsent 0 0\n' "$nonce"; continue
  fi
  "${SHELL:-/bin/sh}" "$d/c" < "$d/i" > "$d/o" 2> "$d/e"
  rc=$?
  if ! { printf . >> "$d/o" && printf . >> "$d/e"; } 2>/dev/null; then
    printf '%s lost 0 0\n' "$nonce"; continue
  fi
  no=$(($(wc -c < "$d/o") - 1)); ne=$(($(wc -c < "$d/e") - 1))
  printf '%s %s %s %s\n' "$nonce" "$rc" "$no" "$ne"
  head -c "$no" "$d/o"; head -c "$ne" "$d/e"
done
"""
"""The remote session's loop (POSIX ``sh``; ``base64``, ``mktemp`` and ``head -c`` of
coreutils or busybox), run as ``sh -c LOOP sh NONCE`` by the login shell. Protocol, one
command at a time: the loop prints ``NONCE ready``; each request is one line ``x<base64
command> x<base64 stdin>``; the command runs as ``$SHELL FILE`` (the login shell, now without
its rc files: it is not the session's first shell), and the answer is a line ``NONCE STATUS
OUT_BYTES ERR_BYTES`` followed by that many bytes of stdout and of stderr. The sizes are
taken once, after the command, with a sentinel byte written to both files: output that a
process the command left in the background writes later is never sent, and the next command
gets new files. STATUS ``unsent``: the request could not be stored on the host (no space in
``$TMPDIR``), the command did not run; ``lost``: it ran, but its output could not be kept.
End of input ends the loop and removes its temporary directory (also when the connection
breaks: SIGPIPE and SIGHUP exit through the EXIT trap, which dash would otherwise skip)."""


ABORT_POLL_S = 0.5
"""How often a command waiting on its session checks whether the session was aborted."""


class _SessionFailed(Exception):
    """The session's ssh ended (or spoke out of protocol): its exit status and stderr."""

    def __init__(self, returncode: int | None, stderr: bytes) -> None:
        super().__init__(returncode, stderr)
        self.returncode, self.stderr = returncode, stderr


class _SessionTmpFull(Exception):
    """The session's temporary directory on the host is full: ``unsent`` (the command did not
    run) or ``lost`` (it ran; its output could not be kept)."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.ran = status == "lost"


class _Session:
    """One running remote session (:data:`_SESSION_LOOP`) and the local ``ssh`` carrying it.

    Not thread-safe: :class:`SshTransport` serialises its use with a lock.
    """

    def __init__(self, argv: list[str], nonce: str) -> None:
        self.argv = argv
        self.nonce = nonce.encode()
        self.stale = False  # reconnect() was called while a command ran: drop after it
        self.aborted = False  # abort_session(): a command waiting on it fails at once
        self.proc: subprocess.Popen | None = None
        self._stderr = tempfile.TemporaryFile()
        self._buf = bytearray()

    def start(self, timeout: float | None) -> None:
        """Start ssh and wait for the loop's banner (output before it, even on the banner's
        line, comes from the remote login shell's start-up files and is skipped).

        Raises:
            _SessionFailed: ssh ended first; TimeoutError: no banner within ``timeout``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        # a session of its own: Ctrl-C at the terminal interrupts servedeck, which ends the
        # session itself when a command was under way, and must not kill the ssh it still needs
        # to give the lock back and roll back
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, start_new_session=True)
        assert self.proc.stdin is not None  # stdin=PIPE
        os.set_blocking(self.proc.stdin.fileno(), False)
        try:
            while not self._line(deadline).endswith(self.nonce + b" ready"):
                pass
        except BaseException:
            self.close()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, command: str, data: bytes, deadline: float | None) -> tuple[int, bytes, bytes]:
        """Run ``command`` with ``data`` on its stdin; (exit status, stdout, stderr).

        Raises:
            _SessionFailed: the session ended or answered out of protocol; _SessionTmpFull:
            its temporary directory is full; TimeoutError: no answer by ``deadline``
            (``time.monotonic()``).
        """
        self._write(b"x" + base64.b64encode(command.encode()) + b" x" + base64.b64encode(data) + b"\n",
                    deadline)
        header = self._line(deadline).split()
        if len(header) == 4 and header[0] == self.nonce and header[1] in (b"unsent", b"lost"):
            raise _SessionTmpFull(header[1].decode())
        if len(header) != 4 or header[0] != self.nonce or not all(h.isdigit() for h in header[1:]):
            raise _SessionFailed(None, b"the remote session answered out of protocol: " + b" ".join(header)[:200])
        rc, n_out, n_err = (int(h) for h in header[1:])
        out = self._exact(n_out, deadline)
        return rc, out, self._exact(n_err, deadline)

    def close(self) -> None:
        """End the loop (end of its input) and reap ssh: asked to stop (SIGTERM) when it has
        not ended within 0.2 s (a command still runs), killed 0.5 s later."""
        atexit.unregister(self.close)
        proc, self.proc = self.proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            for stop, wait_s in ((None, 0.2), (proc.terminate, 0.5), (proc.kill, None)):
                if stop is not None:
                    stop()
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._stderr.close()

    # ------------------------------------------------------------------ pipes

    def _failed(self) -> _SessionFailed:
        proc = self.proc
        rc = None
        if proc is not None:
            try:
                rc = proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self._stderr.seek(0)
        return _SessionFailed(rc, self._stderr.read())

    def _wait(self, fd: int, write: bool, deadline: float | None) -> None:
        """Wait until ``fd`` can be read (written), in slices of :data:`ABORT_POLL_S` so that
        :meth:`SshTransport.abort_session` from another thread ends the wait.

        Raises:
            TimeoutError: ``deadline`` passed; _SessionFailed: the session was aborted.
        """
        while True:
            if self.aborted:
                raise _SessionFailed(None, b"the session was aborted (its connection froze)")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            step = ABORT_POLL_S if left is None else min(left, ABORT_POLL_S)
            ready = select.select([], [fd], [], step) if write else select.select([fd], [], [], step)
            if any(ready):
                return

    def _write(self, data: bytes, deadline: float | None) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        view = memoryview(data)
        while view:
            self._wait(fd, True, deadline)
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise self._failed() from None

    def _fill(self, deadline: float | None) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        self._wait(fd, False, deadline)
        chunk = os.read(fd, 65536)
        if not chunk:
            raise self._failed()
        self._buf += chunk

    def _line(self, deadline: float | None) -> bytes:
        start = 0
        while (end := self._buf.find(b"\n", start)) < 0:
            start = len(self._buf)
            self._fill(deadline)
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return line

    def _exact(self, n: int, deadline: float | None) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


def _short(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def first_known_hosts(t: ResolvedTarget) -> str:
    """The first user known_hosts file of ``t`` (where a new key should be added)."""
    files = [f for f in t.known_hosts_files if f != "/dev/null"]
    return files[0] if files else "~/.ssh/known_hosts"


def _looks_like_ssh_error(stderr: str) -> bool:
    markers = ("ssh: ", "Connection refused", "Connection timed out", "Timeout, server",
               "Could not resolve hostname", "Connection closed by", "kex_exchange_identification",
               "No route to host", "Bad configuration option", "Connection reset",
               "Broken pipe", "mux_client", "Control socket")
    return any(m in stderr for m in markers)
