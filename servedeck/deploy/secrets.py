"""Secrets of a deployment: where they are, the API key the server wants, and scrubbing.

A secret is the value of a vLLM flag that carries one (``--api-key``, ``--hf-token``), in
any argv shape (``--api-key VALUE`` as two items, ``--api-key=VALUE`` as one), or of an
environment variable whose name says it is one (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
``*PASSWORD*``: ``VLLM_API_KEY``, ``HF_TOKEN``, ...) in mapping or ``NAME=VALUE`` list form.
Scrubbing is by value: every occurrence of a secret value in any string of any record
(compose text, argv, profile dumps, diffs, startup logs, history lines) becomes ``***``, so a
shape nobody listed cannot leak it either.

vLLM reads its API key from ``--api-key`` or ``VLLM_API_KEY`` (``vllm/entrypoints/openai/
cli_args.py`` and ``vllm/envs.py``, v0.11). A profile's values are literal: the renderer writes
every ``$`` as ``$$`` (:func:`servedeck.compose.render.yaml_scalar`), so a key written
``${NAME}`` reaches the server as those very characters, and servedeck sends exactly that. The
secrets of a file that is already on a host are read as Compose reads them there
(:func:`deployed_secrets`: ``docker compose config`` substitutes its variables).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servedeck.host.remote import RemoteHost

SECRET_FLAGS = ("--api-key", "--hf-token")
"""vLLM flags whose value is a secret."""
SECRET_ENV_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD", re.I)
"""Environment variable names that hold secrets."""
REDACTED = "***"


@dataclass(frozen=True)
class Secrets:
    """The secrets of one deployment: ``where`` (``--api-key``, ``environment.HF_TOKEN``) →
    value. Values shorter than 4 characters are not scrubbed (they would mangle text)."""

    values: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Where the secrets are (no values), sorted: what a record may say was redacted."""
        return sorted(self.values)

    def _needles(self) -> list[str]:
        # each value also as a compose file writes it: the renderer and `docker compose config`
        # print a literal $ as $$
        values = {v for v in self.values.values() if len(v) >= 4}
        return sorted(values | {v.replace("$", "$$") for v in values}, key=len, reverse=True)

    def scrub_text(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***``."""
        for needle in self._needles():
            text = text.replace(needle, REDACTED)
        return text

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
        have with different values keeps ``other``'s as ``"<where> (<label>)"``."""
        merged = dict(self.values)
        for where, value in other.values.items():
            if merged.get(where, value) != value:
                where = f"{where} ({label})"
            merged[where] = value
        return Secrets(merged)

    @property
    def api_key(self) -> str | None:
        """The key the server wants (``--api-key`` first, then ``VLLM_API_KEY``), as the
        server gets it; None without one."""
        return self.values.get("--api-key") or self.values.get("environment.VLLM_API_KEY")


def find_secrets(argv: list[str], environment: Mapping[str, str | None] | list[str] | None) -> Secrets:
    """The secrets in a server argv and a container environment (mapping or ``NAME=VALUE``
    list)."""
    found: dict[str, str] = {}
    for i, item in enumerate(argv):
        for flag in SECRET_FLAGS:
            if item == flag and i + 1 < len(argv):
                found[flag] = argv[i + 1]
            elif item.startswith(flag + "="):
                found[flag] = item.split("=", 1)[1]
    pairs: list[tuple[str, Any]]
    if isinstance(environment, Mapping):
        pairs = list(environment.items())
    else:
        pairs = [(name, value if eq else None) for name, eq, value in (e.partition("=") for e in environment or [])]
    for name, value in pairs:
        if value and SECRET_ENV_RE.search(str(name)):
            found[f"environment.{name}"] = str(value)
    return Secrets(found)


def deployed_secrets(host: "RemoteHost") -> Secrets:
    """The secrets of the deployed ``docker-compose.yml`` on the host as Compose reads them
    there: the first service of ``docker compose config --format json`` (its variables
    substituted from the host's environment and the project's ``.env``), its command and
    environment. Values stay in memory; an empty :class:`Secrets` when compose refuses the file
    or it has no service."""
    norm = host.normalised_service()
    if norm is None:
        return Secrets()
    svc = norm[1]
    return find_secrets([str(c) for c in svc.get("command") or []], svc.get("environment") or {})
