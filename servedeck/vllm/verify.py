"""Effective-args verification: what the profile set vs what vLLM reported as non-default.

vLLM logs ``non-default args: {...}`` (argparse dest → value, only values that differ from
vLLM's defaults; vLLM ``vllm/entrypoints/utils.py`` ``log_non_default_args``). From the profile and the
image catalog servedeck predicts the value of every setting the profile (or the image's
model.yaml) fixes, and compares:

* ``confirmed`` — reported with the expected value;
* ``differs`` — reported with another value (an error: the server does not run the profile);
* ``default`` — not reported, and the expected value is vLLM's own default (nothing to see);
* ``not reported`` — not reported although it is not known to be vLLM's default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # ArgCheck is a run file's content: reading a record imports pydantic only
    from servedeck.model.catalog import ImageFacts
    from servedeck.model.profile import Profile


class ArgCheck(BaseModel):
    """One setting's verification.

    Attributes:
        setting: vLLM dest name (``max_num_batched_tokens``).
        expected: the value servedeck predicts (None = speculative decoding off).
        reported: the value in ``non-default args`` (None when absent).
        status: ``confirmed`` | ``differs`` | ``default`` | ``not reported``.
        source: ``profile`` or ``image`` (model.yaml default).
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


def _profile_settings(profile: Profile) -> set[str]:
    from servedeck.vllm.launcher import SET_FIELDS
    e = profile.engine
    names = {n for n in SET_FIELDS if getattr(e, n) is not None}
    if e.speculative_state != "default":
        names.add("speculative_config")
    for n in ("enable_auto_tool_choice", "tool_call_parser", "reasoning_parser"):
        if getattr(e, n):
            names.add(n)
    return names | {"served_model_name", "port"}


def _matches(expected: Any, reported: Any) -> bool:
    if isinstance(expected, dict) and isinstance(reported, dict):
        return all(_matches(v, reported.get(k)) for k, v in expected.items())
    if isinstance(expected, float) or isinstance(reported, float):
        try:
            return abs(float(expected) - float(reported)) < 1e-9
        except (TypeError, ValueError):
            return False
    return expected == reported


def verify_args(profile: Profile, facts: ImageFacts | None,
                non_default_args: dict[str, Any] | None) -> list[ArgCheck]:
    """Compare predicted settings with the parsed ``non-default args``.

    Args:
        profile: the deployed profile.
        facts: catalog facts of its image (model.yaml defaults), or None.
        non_default_args: the dict parsed from the startup log, or None when the log had none
            (then every setting is ``not reported``).

    Returns:
        one :class:`ArgCheck` per setting the profile or the image's model.yaml fixes, in
        effective-settings order.
    """
    from servedeck.vllm.launcher import effective_settings
    from servedeck.vllm.names import VLLM_DEFAULTS
    reported_args = non_default_args or {}
    effective = effective_settings(profile, facts)
    mine = _profile_settings(profile)
    out: list[ArgCheck] = []
    for name, expected in effective.items():
        source = "profile" if name in mine else "image"
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
