"""Secrets of a deployment: where they are, the API key the server wants, and scrubbing.

A secret is found the way the server reads it, through the one argv grammar
(:mod:`servedeck.vllm.argv`): the value of a vLLM option whose argparse dest carries one
(:data:`SECRET_DESTS`: ``api_key``, ``hf_token``) in every spelling vLLM accepts (``--api-key
KEY``, ``--api_key KEY``, ``--api-key=KEY``, several keys after one ``--api-key``), in the exl3xpu
launcher's passthrough, as a launcher ``--set vllm.api_key=KEY`` or ``--set env.NAME=KEY``, and
inside a shell string (``sh -c "vllm serve ... --api-key KEY"``, split as ``sh`` splits it); or the
value of an environment variable whose name says it holds one (:data:`SECRET_ENV_RE`:
``VLLM_API_KEY``, ``HF_TOKEN``, ``S3_SECRET_ACCESS_KEY``; not ``..._TOKENS``,
``..._TOKEN_THRESHOLD`` or ``..._PER_TOKEN``) in mapping or ``NAME=VALUE`` list form; the variables an ``env_file``
gives are read as Compose reads them on the host (:func:`deployed_secrets`). Scrubbing is by
value: every occurrence of a secret value in any string of any record (compose text, argv,
profile dumps, diffs, startup logs, history lines, messages) becomes ``***``, so a shape nobody
listed cannot leak it either; in YAML text a scalar that held one is written again as a
double-quoted scalar (:meth:`Secrets.scrub_yaml`), so the record stays the document it was
(``- ***`` would be an alias).

vLLM reads its API key from ``--api-key`` or ``VLLM_API_KEY`` (``vllm/entrypoints/openai/
cli_args.py`` and ``vllm/envs.py``, v0.11). A profile's values are literal: the renderer writes
every ``$`` as ``$$`` (:func:`servedeck.compose.render.yaml_scalar`), so a key written
``${NAME}`` reaches the server as those very characters, and servedeck sends exactly that. The
secrets of a file that is already on a host are read as Compose reads them there
(:func:`deployed_secrets`: ``docker compose config`` substitutes its variables and merges
``env_file``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servedeck.host.remote import RemoteHost

SECRET_DESTS = {"api_key": "--api-key", "hf_token": "--hf-token"}
"""vLLM argparse dests whose value is a secret -> the name a record gives the secret."""
SECRET_FLAGS = tuple(SECRET_DESTS.values())
"""vLLM flags whose value is a secret (as vLLM spells them)."""
SECRET_ENV_RE = re.compile(r"(?:^|_)(?:KEY|(?<!PER_)(?<!MAX_)(?<!MIN_)(?<!NUM_)TOKEN|SECRET|PASSWORD|PASSWD"
                           r"|CREDENTIALS?|KEY_ID)$"
                           r"|(?:^|_)(?:SECRET|PASSWORD|PASSWD)(?:_|$)", re.I)
"""Environment variable names that hold secrets (``HF_TOKEN``, not a rate or a bound named per
token: ``..._S_PER_TOKEN``, ``MAX_TOKEN``, whose values are numbers that scrubbing would erase
from every record, and which a comparison could then no longer tell apart)."""
REDACTED = "***"
MIN_SECRET_CHARS = 4
"""Values shorter than this are not scrubbed (they would mangle text; no key is that short)."""


@dataclass(frozen=True)
class Secrets:
    """The secrets of one deployment: ``where`` (``--api-key``, ``environment.HF_TOKEN``) →
    value. Values shorter than :data:`MIN_SECRET_CHARS` are not scrubbed (they would mangle
    text)."""

    values: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Where the secrets are (no values), sorted: what a record may say was redacted."""
        return sorted(self.values)

    def _needles(self) -> list[str]:
        # each value also as a compose file writes it: the renderer and `docker compose config`
        # print a literal $ as $$
        values = {v for v in self.values.values() if len(v) >= MIN_SECRET_CHARS}
        return sorted(values | {v.replace("$", "$$") for v in values}, key=len, reverse=True)

    def scrub_text(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***``."""
        for needle in self._needles():
            text = text.replace(needle, REDACTED)
        return text

    def scrub_yaml(self, text: str) -> str:
        """YAML ``text`` with every secret value replaced, still the same YAML document: a
        scalar that held a secret is written again as a double-quoted scalar holding ``***``
        (:func:`servedeck.yamlio.rewrite_scalars`; every other byte kept), then what is left
        (a comment) is scrubbed as text. Text that is not YAML is scrubbed as text."""
        if not self.values:
            return text
        from servedeck.yamlio import rewrite_scalars
        return self.scrub_text(rewrite_scalars(text, self.scrub_text))

    def scrub(self, obj: Any) -> Any:
        """A copy of a JSON-like object (dicts, lists, tuples, strings, scalars) with every
        secret value replaced in every string, keys included."""
        if not self.values:
            return obj
        if isinstance(obj, str):
            return self.scrub_text(obj)
        if isinstance(obj, dict):
            return {self.scrub(k): self.scrub(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.scrub(v) for v in obj]
        return obj

    def including(self, other: "Secrets", label: str) -> "Secrets":
        """These secrets and ``other``'s, to scrub both out of one record; a ``where`` both
        have with different values keeps ``other``'s as ``"<where> (<label>)"`` (``"<where>
        (<label> #2)"`` and on when that is taken too): no value is dropped."""
        merged = dict(self.values)
        for where, value in other.values.items():
            key, n = where, 0
            while merged.get(key, value) != value:
                n += 1
                key = f"{where} ({label})" if n == 1 else f"{where} ({label} #{n})"
            merged[key] = value
        return Secrets(merged)

    @property
    def api_key(self) -> str | None:
        """The key the server wants, as the server gets it (the last ``--api-key``, which the
        exl3xpu launcher passes after its ``--set vllm.api_key``, then ``VLLM_API_KEY``); None
        without one."""
        for where in ("--api-key", "--set vllm.api_key", "--set vllm.api-key", "environment.VLLM_API_KEY"):
            if self.values.get(where):
                return self.values[where]
        return None


def find_secrets(argv: list[str], environment: Mapping[str, str | None] | list[str] | None) -> Secrets:
    """The secrets in a server argv (any launcher; shell strings in it included) and a container
    environment (mapping or ``NAME=VALUE`` list). Names: ``--api-key`` (the occurrence vLLM
    uses: the last), ``--api-key #2`` for a second key after it, ``--api-key (earlier)`` for an
    occurrence a later one replaces, ``--set vllm.api_key``, ``environment.NAME``."""
    found: dict[str, str] = {}
    for tokens in _token_lists([str(t) for t in argv]):
        _argv_secrets(tokens, found)
    pairs: list[tuple[str, Any]]
    if isinstance(environment, Mapping):
        pairs = list(environment.items())
    else:
        pairs = [(name, value if eq else None) for name, eq, value in (e.partition("=") for e in environment or [])]
    for name, value in pairs:
        if value and SECRET_ENV_RE.search(str(name)):
            _keep(found, f"environment.{name}", str(value))
    return Secrets(found)


def _keep(found: dict[str, str], where: str, value: str) -> None:
    """Set ``found[where] = value``; an earlier, different value there moves to
    ``"<where> (earlier)"`` (``(earlier 2)`` and on for more), once: the last one keeps the
    name, as the process gets the last, and none is dropped from what a record scrubs."""
    old = found.get(where)
    found[where] = value
    if old is None or old == value:
        return
    earlier = [k for k in found if k.startswith(f"{where} (earlier")]
    if old in (found[k] for k in earlier):
        return
    same = next((k for k in earlier if found[k] == value), None)
    if same is not None:  # the value now in force was an earlier one: the two swap
        found[same] = old
    else:
        found[f"{where} (earlier{f' {len(earlier) + 1}' if earlier else ''})"] = old


def _token_lists(argv: list[str]) -> list[list[str]]:
    """``argv`` and, for each item holding white space (a shell script, or a command Compose was
    given as one string), that item split as ``sh`` splits it."""
    out = [argv]
    for item in argv:
        if any(c.isspace() for c in item):
            try:
                out.append(shlex.split(item))
            except ValueError:  # unbalanced quotes: split on white space
                out.append(item.split())
    return out


def _argv_secrets(tokens: list[str], found: dict[str, str]) -> None:
    from servedeck.launchers import registry
    from servedeck.launchers.base import ArgvError, Token
    from servedeck.vllm.argv import parse_vllm
    # vLLM's flags read as vLLM reads them, wherever they stand (a `vllm serve` argv, or a
    # launcher's passthrough after its `--`, which the vLLM reading skips)
    occurrences = [a for a in parse_vllm(tokens) if a.is_flag and a.dest in SECRET_DESTS and a.values]
    count: dict[str, int] = {}
    for arg in reversed(occurrences):  # the last occurrence is the one argparse keeps
        where = SECRET_DESTS[arg.dest or ""]
        n = count[where] = count.get(where, 0) + 1
        label = where if n == 1 else f"{where} (earlier{'' if n == 2 else f' {n - 1}'})"
        for i, value in enumerate(arg.values):
            found.setdefault(label if i == 0 else f"{label} #{i + 1}", value)
    # a launcher's edits of its own config (exl3xpu: --set vllm.api_key=K, --set env.NAME=K)
    for launcher in registry.launchers():
        if not launcher.edit_option:
            continue
        try:
            launch = launcher.read([Token(t, ()) for t in tokens])
        except ArgvError:
            continue
        for edit in launch.edits:
            target = launcher.edit_target(edit)
            if edit.raw is None or edit.value is None or target is None or not target[1]:
                continue  # no value, or an unset (NAME: null): nothing to keep out
            kind, path = target
            if kind == "engine" and path[0].replace("-", "_") in SECRET_DESTS:
                _keep(found, f"{launcher.edit_option} {edit.key}", edit.raw)
            elif kind == "env" and SECRET_ENV_RE.search(path[0]):
                _keep(found, f"environment.{path[0]}", edit.raw)


def deployed_secrets(host: "RemoteHost", service: str | None = None) -> Secrets:
    """The secrets of the server of the deployed ``docker-compose.yml`` on the host as Compose
    reads them there: service ``service`` (the server's; None: the first, by name) of ``docker
    compose config --format json`` (its variables substituted from the host's environment and
    the project's ``.env``), its entrypoint, command and environment. Values stay in memory; an
    empty :class:`Secrets` when compose refuses the file or it has no such service (a sidecar's
    key is never the one readiness sends)."""
    norm = host.normalised_service(service=service)
    if norm is None:
        return Secrets()
    svc = norm[1]
    return find_secrets([str(c) for c in (svc.get("entrypoint") or []) + (svc.get("command") or [])],
                        svc.get("environment") or {})
