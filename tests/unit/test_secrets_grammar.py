"""Secrets found through the argv grammar and the environment model in every spelling vLLM and
Compose accept, and records that stay valid after redaction (issues 27 item 5 and 28)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servedeck.ab.compare import compare_arms
from servedeck.deploy.record import RunWriter
from servedeck.deploy.secrets import Secrets, find_secrets
from servedeck.runs import store
from servedeck.yamlio import load_data

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs-cpu"
KEY = "sk-grammar-test-0123456789abcdef"
TOKEN = "hf_grammartesttoken0123456789"


@pytest.mark.parametrize("argv, environment, where", [
    (["vllm", "serve", "m", "--api-key", KEY], {}, "--api-key"),
    (["vllm", "serve", "m", "--api_key", KEY], {}, "--api-key"),
    (["vllm", "serve", "m", f"--api-key={KEY}"], {}, "--api-key"),
    (["vllm", "serve", "m", f"--api_key={KEY}"], {}, "--api-key"),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--api-key", KEY], {}, "--api-key"),
    (["models/m", "--gpu", "0", "--set", "vllm.max_model_len=8192", "--", "--api_key", KEY], {}, "--api-key"),
    (["models/m", "--set", f"vllm.api_key={KEY}"], {}, "--set vllm.api_key"),
    (["models/m", "--set", f"env.VLLM_API_KEY={KEY}"], {}, "environment.VLLM_API_KEY"),
    (["sh", "-c", f"exec vllm serve m --api_key '{KEY}' --port 8000"], {}, "--api-key"),
    (["vllm serve m --api-key=" + KEY], {}, "--api-key"),  # a command given as one string
    ([], {"VLLM_API_KEY": KEY}, "environment.VLLM_API_KEY"),
    ([], [f"VLLM_API_KEY={KEY}"], "environment.VLLM_API_KEY"),
])
def test_the_api_key_is_found_in_every_spelling_and_is_the_one_sent(argv, environment, where):
    s = find_secrets(argv, environment)
    assert s.values == {where: KEY}
    assert s.api_key == KEY


@pytest.mark.parametrize("argv, environment, where", [
    (["vllm", "serve", "m", "--hf-token", TOKEN], {}, "--hf-token"),
    (["vllm", "serve", "m", f"--hf_token={TOKEN}"], {}, "--hf-token"),
    ([], {"HF_TOKEN": TOKEN}, "environment.HF_TOKEN"),
    ([], [f"HUGGING_FACE_HUB_TOKEN={TOKEN}"], "environment.HUGGING_FACE_HUB_TOKEN"),
    ([], {"S3_SECRET_ACCESS_KEY": TOKEN}, "environment.S3_SECRET_ACCESS_KEY"),
])
def test_a_token_is_found_in_every_spelling(argv, environment, where):
    assert find_secrets(argv, environment).values == {where: TOKEN}


def test_the_key_vllm_uses_is_the_last_and_every_key_is_scrubbed():
    s = find_secrets(["vllm", "serve", "m", "--api-key", "sk-first-key-1", "sk-first-key-2",
                      "--api_key", KEY], {"VLLM_API_KEY": "sk-env-key-000"})
    assert s.api_key == KEY  # argparse keeps the last occurrence; the flag wins over the variable
    assert s.names == ["--api-key", "--api-key (earlier)", "--api-key (earlier) #2",
                       "environment.VLLM_API_KEY"]
    assert s.scrub_text("sk-first-key-1 sk-first-key-2 sk-env-key-000 " + KEY) == "*** *** *** ***"


@pytest.mark.parametrize("name", ["VLLM_MAX_BAD_WORDS_TOTAL_TOKENS", "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD",
                                  "VLLM_USE_FASTOKENS", "MAX_TOKENS", "KEYBOARD", "HF_HOME",
                                  "STANDIN_DECODE_S_PER_TOKEN", "cost_per_token", "MAX_TOKEN", "GEN_MIN_TOKEN",
                                  "NUM_TOKEN"])
def test_a_setting_named_after_tokens_is_not_a_secret(name):
    """Their values (4096, 0.002) are settings; scrubbing them would rewrite every 4096 in a record
    (the bug: a stand-in's seconds per token became ``***`` in the run record, and a tune could no
    longer see that the host's benchmarked run had the configuration it was about to deploy)."""
    assert find_secrets([], {name: "409600"}).values == {}


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "ACCESS_TOKEN", "TOKEN",
                                  "hf_token", "API_TOKEN", "PERSONAL_TOKEN"])
def test_a_variable_named_for_a_token_is_a_secret(name):
    assert find_secrets([], {name: "hf_abcdefgh"}).values == {f"environment.{name}": "hf_abcdefgh"}


COMPOSE = f"""# rendered for the test; the key: {KEY}
services:
  vllm:
    image: "vllm/vllm-openai@sha256:{'a' * 64}"
    command:
      - --api-key
      - {KEY}
      - --api_key={KEY}
      - "--hf-token"
      - '{TOKEN}'
      - x {KEY} y
    environment:
      VLLM_API_KEY: {KEY}
      NOTE: |
        key {KEY}
      {KEY}: as a key
"""


def test_a_redacted_compose_file_is_the_same_document_with_the_values_replaced():
    s = find_secrets(["--api-key", KEY, "--hf-token", TOKEN], {})
    clean = s.scrub_yaml(COMPOSE)
    assert KEY not in clean and TOKEN not in clean
    data = load_data(clean)  # `- ***` would be an alias: it stays valid YAML
    svc = data["services"]["vllm"]
    assert svc["command"] == ["--api-key", "***", "--api_key=***", "--hf-token", "***", "x *** y"]
    assert svc["environment"] == {"VLLM_API_KEY": "***", "NOTE": "key ***\n", "***": "as a key"}
    # every line without a secret is kept byte for byte
    kept = [ln for ln in COMPOSE.splitlines() if KEY not in ln and TOKEN not in ln]
    assert all(ln in clean.splitlines() for ln in kept)


def test_the_stores_pattern_net_keeps_yaml_valid_and_servedecks_own_words():
    text = f"services:\n  s:\n    command:\n      - --api-key\n      - {KEY}\n      - --hf_token={TOKEN}\n"
    clean = store.redact_yaml(text)
    assert load_data(clean)["services"]["s"]["command"] == ["--api-key", "***", "--hf_token=***"]
    hint = "give the server's key in the profile, --api-key or VLLM_API_KEY, or --api-key <key>"
    assert store.redact(hint) == hint


def _run_with_secret(runs: Path, source: Path, key: str) -> Path:
    run = store.create_run(runs, "cpu-4096", "local")
    for f in source.iterdir():
        if f.name not in (store.RUN_META, store.COMPOSE):
            shutil.copy(f, run.path / f.name)
    text = store.read(source, store.COMPOSE).replace("    command:\n",
                                                     f"    command:\n      - --api-key\n      - {key}\n", 1)
    w = RunWriter(run, find_secrets(["--api-key", key], {}))
    w.save_compose(text, "0" * 64)
    return run.path


def test_ab_compares_runs_whose_records_held_a_secret(tmp_path):
    a = _run_with_secret(tmp_path / "runs", RUNS / "0001-cpu-4096-local", KEY)
    b = _run_with_secret(tmp_path / "runs", RUNS / "0002-cpu-8192-local", "sk-other-key-abcdef0123456789")
    assert "- \"***\"" in (a / store.COMPOSE).read_text()
    diff = compare_arms(a, b)  # the bug: "found undefined alias '**'"
    assert "compose" in diff.compared
    assert any("max_num_batched_tokens" in v.name for v in diff.differences)


def test_run_files_and_directories_are_owner_only(tmp_path):
    run = store.create_run(tmp_path / "runs", "p", "h")
    run.write(store.PROFILE_DIFF, [])
    store.write_bench_files(run.path, {"prompt_tokens": 64}, [], {"workload": {"prompt_tokens": 64}})
    assert run.path.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in run.path.iterdir()} == dict.fromkeys(
        [store.RUN_META, store.PROFILE_DIFF, store.WORKLOAD, store.BENCH_SAMPLES, store.BENCH_SUMMARY], 0o600)


def test_secrets_is_empty_when_nothing_is_secret():
    assert Secrets().scrub_yaml(COMPOSE) == COMPOSE


def test_what_a_deploy_shows_is_scrubbed_of_its_secrets():
    from servedeck.deploy.console import QuietReporter, Scrubbed
    s = find_secrets(["--api_key", KEY], {})
    inner = QuietReporter()
    shown = Scrubbed(inner, s.scrub_text)
    shown.phase("failed", f"(APIServer) non-default args: {{'api_key': ['{KEY}']}}")
    shown.info(f"| --api_key {KEY}")
    shown.warn(KEY)
    assert KEY not in "\n".join(inner.lines) and inner.lines[0].endswith("['***']}")


def test_including_never_drops_a_value_whatever_names_collide():
    """Three readings of one name with three values (the server's, its profile's, its parent's
    under one label): every value stays to be scrubbed, each under its own name."""
    merged = (Secrets({"environment.HF_TOKEN": "hf_a0123456789"})
              .including(Secrets({"environment.HF_TOKEN": "hf_b0123456789"}), "parent p")
              .including(Secrets({"environment.HF_TOKEN": "hf_c0123456789"}), "parent p")
              .including(Secrets({"environment.HF_TOKEN": "hf_b0123456789"}), "parent p"))
    assert sorted(merged.values.values()) == ["hf_a0123456789", "hf_b0123456789", "hf_c0123456789"]
    assert merged.names == sorted(["environment.HF_TOKEN", "environment.HF_TOKEN (parent p)",
                                   "environment.HF_TOKEN (parent p #2)"])
    assert merged.scrub_text("hf_a0123456789 hf_b0123456789 hf_c0123456789").count("0123456789") == 0


@pytest.mark.parametrize("argv, environment", [
    ([], [f"HF_TOKEN={TOKEN}", "HF_TOKEN=hf_later0123456789"]),  # a list gives the name twice
    (["models/m", "--set", f"env.HF_TOKEN={TOKEN}"], ["HF_TOKEN=hf_later0123456789"]),
    (["models/m", "--set", f"env.HF_TOKEN={TOKEN}", "--set", "env.HF_TOKEN=hf_later0123456789"], []),
])
def test_a_value_a_later_one_replaces_is_still_kept_out(argv, environment):
    """The process gets the last value of a name, but the file still holds the earlier one."""
    s = find_secrets(argv, environment)
    assert s.values == {"environment.HF_TOKEN": "hf_later0123456789", "environment.HF_TOKEN (earlier)": TOKEN}
    assert s.scrub_text(f"{TOKEN} hf_later0123456789") == "*** ***"


def test_each_earlier_value_is_kept_once():
    env = [f"HF_TOKEN={v}" for v in ("hf_one0123456789", "hf_two0123456789", "hf_one0123456789",
                                     "hf_three0123456789", "hf_two0123456789")]
    s = find_secrets([], env)
    assert s.values["environment.HF_TOKEN"] == "hf_two0123456789"  # what the process gets
    assert sorted(s.values.values()) == ["hf_one0123456789", "hf_three0123456789", "hf_two0123456789"]
    assert s.names == ["environment.HF_TOKEN", "environment.HF_TOKEN (earlier 2)", "environment.HF_TOKEN (earlier)"]


@pytest.mark.parametrize("raw", ["null", "~", "Null"])
def test_a_launcher_variable_set_to_null_is_no_secret(raw):
    """``launcher_env: {HF_TOKEN: null}`` unsets it (``--set env.HF_TOKEN=null``): the word is no
    key to scrub (it would turn every ``null`` of a record into ***)."""
    s = find_secrets(["models/m", "--set", f"env.HF_TOKEN={raw}", "--set", f"vllm.api_key={raw}"], [])
    assert s.values == {} and s.scrub_text("speculative_config=null") == "speculative_config=null"


@pytest.mark.skipif(shutil.which("docker") is None, reason="Docker CLI not installed")
def test_the_deployed_servers_key_is_its_own_service_s_not_a_sidecars(tmp_path):
    """Compose lists services by name: a sidecar named before the server must not give the key
    readiness sends. ``normalised_service`` is fed ``docker compose config`` run here on the file."""
    import subprocess
    from types import SimpleNamespace

    from servedeck.deploy.secrets import deployed_secrets
    from servedeck.host.remote import RemoteHost
    (tmp_path / "docker-compose.yml").write_text(
        "services:\n  aproxy:\n    image: busybox\n    environment: {VLLM_API_KEY: sk-proxy-0123456789}\n"
        f"  vllm:\n    image: busybox\n    environment: {{VLLM_API_KEY: {KEY}}}\n")

    class Here(SimpleNamespace):
        def compose(self, args, **_):
            return subprocess.run(["docker", "compose", "-p", "here", *args], cwd=tmp_path,
                                  capture_output=True, text=True)
        normalised_service = RemoteHost.normalised_service
    if Here().compose(["version"]).returncode != 0:
        pytest.skip("Compose v2 not installed")
    assert deployed_secrets(Here(), "vllm").api_key == KEY
    assert deployed_secrets(Here(), "gone").api_key is None
    assert deployed_secrets(Here()).api_key == "sk-proxy-0123456789"  # no name: the first, as before
    # status and logs name the server's service and take the first only when the file lacks it
    assert Here().normalised_service(service="vllm", or_first=True)[0] == "vllm"
    assert Here().normalised_service(service="gone", or_first=True)[0] == "aproxy"
    assert Here().normalised_service(service="gone") is None
