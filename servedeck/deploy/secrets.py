"""Secrets of a deployment: where they are, the API key the server wants, and scrubbing.

A secret is the value of a vLLM flag that carries one (``--api-key``, ``--hf-token``), in
any argv shape (``--api-key VALUE`` as two items, ``--api-key=VALUE`` as one), or of an
environment variable whose name says it is one (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
``*PASSWORD*``: ``VLLM_API_KEY``, ``HF_TOKEN``, ...) in mapping or ``NAME=VALUE`` list form.
Scrubbing is by value: every occurrence of a secret value in any string of any record
(compose text, argv, profile dumps, diffs, startup logs, history lines) becomes ``***``, so a
shape nobody listed cannot leak it either.

vLLM reads its API key from ``--api-key`` or ``VLLM_API_KEY`` (``vllm/entrypoints/openai/
cli_args.py`` and ``vllm/envs.py``, v0.11); a value written ``${NAME}`` is taken from the
deploying user's environment variable ``NAME`` for the requests servedeck itself sends.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

SECRET_FLAGS = ("--api-key", "--hf-token")
"""vLLM flags whose value is a secret."""
SECRET_ENV_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD", re.I)
"""Environment variable names that hold secrets."""
REDACTED = "***"
_INTERPOLATION = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::?[-?][^}]*)?\}?$")


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
        return sorted({v for v in self.values.values() if len(v) >= 4}, key=len, reverse=True)

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

    @property
    def api_key(self) -> str | None:
        """The key the server wants (``--api-key`` first, then ``VLLM_API_KEY``), with a
        ``${NAME}`` value taken from this process's environment; None without one."""
        value = self.values.get("--api-key") or self.values.get("environment.VLLM_API_KEY")
        if value is None:
            return None
        m = _INTERPOLATION.match(value)
        return os.environ.get(m.group(1)) if m else value


def find_secrets(argv: list[str], environment: dict[str, str | None] | list[str] | None) -> Secrets:
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
    if isinstance(environment, dict):
        pairs = list(environment.items())
    else:
        pairs = [tuple(e.split("=", 1)) if "=" in e else (e, None) for e in environment or []]
    for name, value in pairs:
        if value and SECRET_ENV_RE.search(str(name)):
            found[f"environment.{name}"] = str(value)
    return Secrets(found)
