"""``args_verification.json``: each setting the server confirmed, or not
(:class:`servedeck.vllm.verify.ArgCheck`, a result of :mod:`servedeck.vllm`)."""

from __future__ import annotations

from pydantic import ConfigDict, RootModel

from servedeck.vllm.verify import ArgCheck

__all__ = ["ArgCheck", "ArgsVerification"]


class ArgsVerification(RootModel[list[ArgCheck]]):
    """``args_verification.json``: one ``servedeck.vllm.verify.ArgCheck`` per setting the profile
    or the image fixes: ``{"setting", "expected", "reported", "status", "source"}``, status
    `confirmed` | `differs` | `default` | `not reported`."""

    model_config = ConfigDict(defer_build=True)
