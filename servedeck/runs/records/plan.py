"""What the deploy plan computed: ``profile.resolved.json``, ``effective.json``, ``argv.json``,
``profile.diff.json``."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, RootModel

from servedeck.runs.records.base import Record

__all__ = ["ProfileSnapshot", "EffectiveSettings", "ArgvRecord", "ProfileChange", "ProfileDiff"]


class ProfileSnapshot(RootModel[dict[str, Any]]):
    """``profile.resolved.json``: the resolved profile as deployed
    (``servedeck.model.profile.Profile.model_dump(mode="json")``). Kept as the mapping it was
    written as, so that a record stays readable when the profile schema moves on."""

    model_config = ConfigDict(defer_build=True)


class EffectiveSettings(RootModel[dict[str, Any]]):
    """``effective.json``: the settings vLLM runs with, image defaults plus the profile's
    overrides, keyed by vLLM dest names (``max_num_batched_tokens``, ``speculative_config``,
    ...; the rendered service's effective settings as its launcher reads the command,
    ``servedeck.compose.service.Service.settings``)."""

    model_config = ConfigDict(defer_build=True)


class ArgvRecord(Record):
    """``argv.json``: the server's command as the container starts it."""

    command: list[str] = Field(description="the container command, token by token (the launcher's argv)")
    entrypoint: list[str] = Field(default_factory=list, description="the image's entrypoint, token by token")


class ProfileChange(Record):
    """One field the profile changes against its parent."""

    path: str = Field(description="dotted profile path, `engine.max_num_batched_tokens`")
    parent: Any = Field(None, description="the parent's value")
    value: Any = Field(None, description="this profile's value")


class ProfileDiff(RootModel[list[ProfileChange]]):
    """``profile.diff.json``: the fields the profile changes against its parent, in profile order
    (empty when it has no parent)."""

    model_config = ConfigDict(defer_build=True)
