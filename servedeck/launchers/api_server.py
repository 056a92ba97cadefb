"""The OpenAI API server module: ``python -m vllm.entrypoints.openai.api_server`` (the
ENTRYPOINT of older vLLM images). Its ``main`` parses the same arguments as ``vllm serve`` but
serves only ``--model``: a positional model is parsed and never used (every release from 0.10.2
to 0.32.0, ``make_arg_parser``; see :func:`servedeck.vllm.argv.model_argument`), so the model
is rendered as ``--model MODEL``.
"""

from __future__ import annotations

from servedeck.launchers.base import Launcher
from servedeck.vllm.argv import python_start

MODULE = "vllm.entrypoints.openai.api_server"


class ApiServer(Launcher):
    """``python -m vllm.entrypoints.openai.api_server --model MODEL --flags``."""

    name = "vllm-api-server"
    start = ("python3", "-m", MODULE)
    default_port = 8000
    style = "api_server"
    in_image = "api_server"
    model_option = "--model"

    def start_length(self, argv: list[str]) -> int:
        module, _, n = python_start(argv)
        return n if module == MODULE else 0

    def model_items(self, model: str) -> list[str]:
        return ["--model", model]


LAUNCHER = ApiServer()
