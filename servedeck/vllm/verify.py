"""Effective-args verification: what the profile set vs what vLLM reported as non-default.

vLLM logs ``non-default args: {...}`` (argparse dest → value, only values that differ from
vLLM's defaults; vLLM ``vllm/entrypoints/utils.py`` ``log_non_default_args``). The rendered
service's effective settings (as its launcher reads the command it was given, with their
provenance: :class:`servedeck.launchers.base.Setting`) predict the value of every setting the
profile (or the image's launcher config) fixes, and are compared:

* ``confirmed`` — reported with the expected value;
* ``differs`` — reported with another value (an error: the server does not run the profile);
* ``default`` — not reported, and the expected value is vLLM's own default (nothing to see);
* ``not reported`` — not reported although it is not known to be vLLM's default.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ArgCheck(BaseModel):
    """One setting's verification.

    Attributes:
        setting: vLLM dest name (``max_num_batched_tokens``).
        expected: the value servedeck predicts (None = speculative decoding off).
        reported: the value in ``non-default args`` (None when absent).
        status: ``confirmed`` | ``differs`` | ``default`` | ``not reported``.
        source: ``profile`` (a flag or a config edit of the command) or ``image`` (the image's
            default, or its launcher config such as model.yaml).
    """

    model_config = ConfigDict(extra="forbid")

    setting: str = Field(description="vLLM dest name (`max_num_batched_tokens`)")
    expected: Any = Field(description="the value servedeck predicts (null: speculative decoding off)")
    reported: Any = Field(None, description="the value in `non-default args` (null when absent)")
    status: str = Field(description="`confirmed` | `differs` | `default` | `not reported`")
    source: str = Field(description="`profile`, or `image` (a model.yaml default)")

    def render(self) -> str:
        """``max_num_batched_tokens: confirmed (8192)`` / ``differs (expected X, got Y)``."""
        if self.status == "differs":
            return f"{self.setting}: differs (expected {self.expected!r}, got {self.reported!r})"
        if self.status == "confirmed":
            return f"{self.setting}: confirmed ({self.reported!r})"
        return f"{self.setting}: {self.status} (expected {self.expected!r})"


def _matches(expected: Any, reported: Any) -> bool:
    if isinstance(expected, dict) and isinstance(reported, dict):
        return all(_matches(v, reported.get(k)) for k, v in expected.items())
    if isinstance(expected, float) or isinstance(reported, float):
        try:
            return abs(float(expected) - float(reported)) < 1e-9
        except (TypeError, ValueError):
            return False
    return expected == reported


def verify_args(effective: dict[str, Any], non_default_args: dict[str, Any] | None) -> list[ArgCheck]:
    """Compare predicted settings with the parsed ``non-default args``.

    Args:
        effective: the deployed service's effective settings
            (:attr:`servedeck.compose.service.Service.effective`): by vLLM dest name, each a
            setting with its ``value`` and its ``source`` (``servedeck.launchers.base.Setting``;
            not imported: the launchers read vLLM's argv grammar, a layer above this one).
        non_default_args: the dict parsed from the startup log, or None when the log had none
            (then every setting is ``not reported``).

    Returns:
        one :class:`ArgCheck` per effective setting, in effective-settings order.
    """
    from servedeck.vllm.names import VLLM_DEFAULTS
    reported_args = non_default_args or {}
    out: list[ArgCheck] = []
    for name, setting in effective.items():
        expected = setting.value
        source = "profile" if setting.source in ("set", "flag") else "image"
        if name in reported_args:
            got = reported_args[name]
            status = "confirmed" if _matches(expected, got) else "differs"
        elif expected is None and name == "speculative_config":
            got, status = None, "confirmed"  # off: vLLM reports nothing
        elif name in VLLM_DEFAULTS and VLLM_DEFAULTS[name] is not None and _matches(
                expected, VLLM_DEFAULTS[name]):
            got, status = None, "default"
        else:
            got, status = None, "not reported"
        out.append(ArgCheck(setting=name, expected=expected, reported=got, status=status,
                            source=source))
    return out
