"""The ``vllm serve`` launcher: the ``vllm`` console script's ``serve`` subcommand (the
ENTRYPOINT of vLLM's own images, e.g. ``vllm/vllm-openai``), whose command is vLLM's argv: the
model as the first positional, then flags.

Starts it recognises (vLLM ``pyproject.toml``: the ``vllm`` script runs
``vllm.entrypoints.cli.main``): ``vllm serve`` (the script by any path) and ``python[3[.N]]
[OPTIONS] -m vllm.entrypoints.cli.main serve``.
"""

from __future__ import annotations

from servedeck.launchers.base import Launcher
from servedeck.vllm.argv import python_start


class VllmServe(Launcher):
    """``vllm serve MODEL --flags``."""

    name = "vllm"
    start = ("vllm", "serve")
    default_port = 8000
    style = "serve"
    in_image = "serve"
    hints = ((("vllm", "xpu"), "xpu"), ("=intel/vllm", "xpu"), (("vllm", "cpu"), "cpu"),
             ("=vllm/vllm-openai", "cuda"))

    def start_length(self, argv: list[str]) -> int:
        if argv[:1] and argv[0].rsplit("/", 1)[-1] == "vllm" and argv[1:2] == ["serve"]:
            return 2
        module, _, n = python_start(argv)
        if module == "vllm.entrypoints.cli.main" and argv[n:n + 1] == ["serve"]:
            return n + 1
        return 0


LAUNCHER = VllmServe()
