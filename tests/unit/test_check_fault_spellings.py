"""Variants of the field cases' kinds (tests/fixtures/cases/field-2): the same fault in other
spellings and positions, and twins that must stay clean.

- loopback ``--host`` in every spelling of a loopback address (case 32);
- the server command behind an overridden ``entrypoint``: Docker runs entrypoint + command as
  one argv, and ``sh -c SCRIPT`` runs SCRIPT (cases 32 and 34 through it);
- quote characters that reach the container as part of an environment value (case 33).

The image is case 32's pinned one, with the facts of ``images.yaml`` beside the cases.
"""

from __future__ import annotations

import json

import pytest
from test_check_field_faults import catalog  # noqa: F401  (the cases' image facts)

from servedeck.compose.check import check_compose_text
from servedeck.compose.rules.server import is_loopback

IMAGE = "ghcr.io/example/llm-server@sha256:69ab1604404613e831db7db77dfdbd08cca1c65e5264b8d833091da753bed4a3"


def _compose(service: str) -> str:
    return (f"services:\n  llm:\n    image: {IMAGE}\n{service}"
            "    ports:\n      - \"8000:8000\"\n"
            "    deploy:\n      resources:\n        reservations:\n          devices:\n"
            "            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n")


def _rules(text: str, cat) -> dict[str, str]:
    return {f.rule: f.severity.value for f in check_compose_text(text, file="x.yml", catalog=cat)}


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.1", "localhost", "LOCALHOST",
                                  "::1", "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "ip6-loopback"])
def test_every_spelling_of_a_loopback_host_is_the_same_fault(host, catalog):  # noqa: F811
    assert is_loopback(host)
    text = _compose(f"    command: [example/model-7b, --host, \"{host}\", --port, \"8000\"]\n")
    assert _rules(text, catalog).get("server/host-loopback") == "error"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gpu-host", "128.0.0.1"])
def test_hosts_that_are_not_loopback_stay_clean(host, catalog):  # noqa: F811
    assert not is_loopback(host)
    text = _compose(f"    command: [example/model-7b, --host, \"{host}\", --port, \"8000\"]\n")
    assert "server/host-loopback" not in _rules(text, catalog)


@pytest.mark.parametrize("service", [
    '    entrypoint: ["vllm"]\n    command: [serve, example/model-7b, --host, 127.0.0.1]\n',
    '    entrypoint: ["/usr/local/bin/vllm", "serve"]\n    command: [example/model-7b, --host, 127.0.0.1]\n',
    '    entrypoint: [python3, -m, vllm.entrypoints.cli.main, serve]\n'
    '    command: [example/model-7b, --host=127.0.0.1]\n',
    '    entrypoint: [python3.12, -m, vllm.entrypoints.openai.api_server]\n'
    '    command: [--model, example/model-7b, --host, localhost]\n',
    '    entrypoint: ["/bin/bash", "-c"]\n    command: ["vllm serve example/model-7b --host 127.0.0.1"]\n',
    '    entrypoint: [sh, -c, "exec vllm serve example/model-7b --host \'127.0.0.1\'"]\n',
    '    entrypoint: [sh, -ec, "HF_HUB_OFFLINE=1 exec vllm serve example/model-7b --host 127.0.0.1"]\n',
    '    entrypoint: [bash, --login, -o, pipefail, -e, -c, "exec -a vllm vllm serve m --host 127.0.0.1"]\n',
    '    entrypoint: [/usr/bin/env, HF_HUB_OFFLINE=1, vllm, serve]\n    command: [m, --host, 127.0.0.1]\n',
    '    entrypoint: [tini, -g, --, vllm, serve]\n    command: [m, --host, 127.0.0.1]\n',
    '    entrypoint: [dumb-init, --single-child, vllm, serve, m, --host, 127.0.0.1]\n',
    '    entrypoint: [python3, -u, -X, dev, -mvllm.entrypoints.openai.api_server]\n    command: [--host, 127.0.0.1]\n',
    '    entrypoint: [sh, -c]\n    command: ["vllm serve m --api-key abc#1 --host 127.0.0.1 # loopback on purpose"]\n',
    '    entrypoint: null\n    command: [example/model-7b, --host, 127.0.0.1]\n',
], ids=["vllm+serve", "abs-path", "cli-main", "api-server", "bash-c-item", "sh-c-exec", "sh-ec-assignment",
        "bash-options-exec-a", "env", "tini", "dumb-init", "python-options", "hash-in-word", "null-is-unset"])
def test_the_server_command_behind_an_entrypoint_is_read_as_docker_runs_it(service, catalog):  # noqa: F811
    assert _rules(_compose(service), catalog).get("server/host-loopback") == "error"


def test_a_removed_variable_is_found_behind_a_shell_entrypoint(catalog):  # noqa: F811
    text = _compose('    entrypoint: [/bin/sh, -c, "exec vllm serve example/model-7b"]\n'
                    '    environment:\n      VLLM_USE_V1: "0"\n')
    assert _rules(text, catalog).get("env/not-read-by-version") == "warning"


def test_a_string_command_after_sh_c_runs_only_its_first_word(catalog):  # noqa: F811
    """Compose splits a string command into items; ``sh -c`` takes the first as its script and
    the rest as $0, $1, ...: the server never gets its flags."""
    found = check_compose_text(_compose('    entrypoint: [/bin/sh, -c]\n'
                                        '    command: "vllm serve example/model-7b --port 8000"\n'),
                               file="x.yml", catalog=catalog)
    split = [f for f in found if f.rule == "argv/shell-c-split"]
    assert split and split[0].severity.value == "error" and "'vllm'" in split[0].message
    assert split[0].path == "services.llm.command"  # a string command: its items share its path
    listed = check_compose_text(_compose('    entrypoint: [/bin/sh, -c]\n'
                                         '    command: [vllm, serve, example/model-7b]\n'),
                                file="x.yml", catalog=catalog)
    assert [f.path for f in listed if f.rule == "argv/shell-c-split"] == ["services.llm.command[1]"]


@pytest.mark.parametrize("script", ['vllm serve "$MODEL"', "vllm serve m && sleep 1", "vllm serve m > /log",
                                    "if true; then vllm serve m; fi"])
def test_a_shell_script_with_shell_syntax_is_said_not_analysed(script, catalog):  # noqa: F811
    rules = _rules(_compose(f"    entrypoint: [bash, -c, {script!r}]\n"), catalog)
    assert rules.get("argv/not-analysed") == "info" and "server/host-loopback" not in rules


def test_an_unknown_entrypoint_is_said_not_analysed_and_a_known_one_is_not(catalog):  # noqa: F811
    assert _rules(_compose("    entrypoint: [/opt/start-server]\n    command: [--host, 127.0.0.1]\n"),
                  catalog).get("argv/not-analysed") == "info"
    assert "argv/not-analysed" not in _rules(
        _compose('    entrypoint: [vllm, serve]\n    command: [example/model-7b]\n'), catalog)


@pytest.mark.parametrize("env, rule", [
    ('      - VLLM_API_KEY="deploy-key-1"\n', "env/list-literal-quotes"),
    ("      - VLLM_API_KEY='deploy-key-1'\n", "env/list-literal-quotes"),
    ("      VLLM_API_KEY: '\"deploy-key-1\"'\n", "env/literal-quotes"),
    ('      VLLM_API_KEY: "\\"deploy-key-1\\""\n', "env/literal-quotes"),
    ("      - 'VLLM_API_KEY=\"deploy-key-1\" '\n", "env/list-literal-quotes"),
    ("      VLLM_API_KEY: ' \"deploy-key-1\"'\n", "env/literal-quotes"),
    ("      - '\"VLLM_API_KEY\"=deploy-key-1'\n", "env/quoted-name"),
])
def test_quote_characters_the_container_gets_in_a_value_are_an_error(env, rule, catalog):  # noqa: F811
    text = _compose("    command: [example/model-7b]\n    environment:\n" + env)
    found = [f for f in check_compose_text(text, file="x.yml", catalog=catalog) if f.rule == rule]
    assert found and found[0].severity.value == "error" and "quote" in found[0].message


@pytest.mark.parametrize("env", ['      - VLLM_API_KEY="deploy-key-1\n', "      - VLLM_API_KEY=\"deploy-key-1'\n",
                                 "      HF_TOKEN: hf_abc'\n", "      GREETING: rock 'n' roll'\n"])
def test_an_unpaired_quote_at_one_end_is_a_warning(env, catalog):  # noqa: F811
    text = _compose("    command: [example/model-7b]\n    environment:\n" + env)
    assert _rules(text, catalog).get("env/stray-quote") == "warning"


@pytest.mark.parametrize("env", ['      - VLLM_API_KEY=deploy-key-1\n', '      - "VLLM_API_KEY=deploy-key-1"\n',
                                 '      VLLM_API_KEY: "deploy-key-1"\n', "      GREETING: it's fine\n",
                                 '      JSON: \'{"a": "b"}\'\n', '      - EMPTY=\n',
                                 "      SQL_FILTER: \"name = 'x'\"\n"])
def test_values_without_quotes_at_their_ends_stay_clean(env, catalog):  # noqa: F811
    text = _compose("    command: [example/model-7b]\n    environment:\n" + env)
    assert not [f for f in check_compose_text(text, file="x.yml", catalog=catalog) if f.rule.startswith("env/")]


@pytest.mark.parametrize("value, bad", [("8k", False), ("8K", False), ("1.5k", False), ("-1", False),
                                        ("1.5K", True), ("8192.0", True), ("auto", True)])
def test_human_readable_ints_are_judged_by_the_one_grammar(value, bad, catalog):  # noqa: F811
    """vLLM's human_readable_int (servedeck.vllm.argv): decimals only with a decimal suffix; a
    plain int (negative too) parses, and vLLM's config checks judge it later."""
    text = _compose(f"    command: [example/model-7b, --max-num-batched-tokens, \"{value}\"]\n")
    assert ("flags/bad-value" in _rules(text, catalog)) is bad


def test_a_list_flag_that_takes_the_model_is_an_error(catalog):  # noqa: F811
    """``--served-model-name`` takes one or more values: a model written after it is one of
    them. This image's vLLM (0.33) refuses the command before that: a command that starts with
    a flag and sets --served-model-name must give the model first (vLLM 0.17+)."""
    swallowed = _compose("    command: [--port, \"8000\", --served-model-name, chat, example/model-7b]\n")
    found = [f for f in check_compose_text(swallowed, file="x.yml", catalog=catalog)
             if f.rule.startswith("argv/model")]
    assert [(f.rule, f.severity.value, f.path) for f in found] == [
        ("argv/model-not-first", "error", "services.llm.command[4]")]
    for fine in ("    command: [example/model-7b, --served-model-name, chat, alias]\n",
                 "    command: [--served-model-name, chat, alias, --model, example/model-7b]\n"):
        assert not [r for r in _rules(_compose(fine), catalog) if r.startswith("argv/model")], fine


@pytest.mark.parametrize("version, spelling", [("0.33.0", "--disable-prefix-caching"),
                                               ("0.34.1", "--disable-prefix-caching"),
                                               ("0.32.0", "--no-enable-prefix-caching"),
                                               ("0.9.2", "--no-enable-prefix-caching")])
def test_prefix_caching_off_is_spelled_as_the_pinned_release_spells_it(tmp_path, version, spelling):
    """vLLM 0.33's table lists ``--disable-prefix-caching`` as the false option, 0.32's
    ``--no-enable-prefix-caching``: the rendered command must be one the image's vLLM accepts.
    The renderer picks the table as the check does (0.34 by 0.33, the nearest older; 0.9, older
    than every table, gets argparse's own ``--no-`` spelling), so what it writes passes."""
    from pathlib import Path as P
    from servedeck.compose.render import render_profile
    from servedeck.model.catalog import Catalog, ImageFacts
    from servedeck.model.profile import Profile
    root = P(__file__).resolve().parents[2]
    digest = "sha256:" + "ab" * 32
    cat = Catalog(tmp_path / "images.yaml")
    cat.add(digest, ImageFacts(repository="registry.example/vllm", launcher="vllm", vllm_version=version,
                               device="cuda", entrypoint=["vllm", "serve"], default_port=8000))
    profile = Profile.model_validate({
        "name": "pc-off", "image": f"registry.example/vllm@{digest}", "launcher": {"kind": "vllm"},
        "model": {"repo_id": "example/model-7b", "served_model_name": ["chat"]},
        "engine": {"enable_prefix_caching": False}})
    text = render_profile(profile, cat, root / "templates").compose_text
    assert spelling in text
    found = check_compose_text(text, file="r.yml", catalog=cat)
    assert not [f for f in found if f.rule.startswith("flags/")], [f.render() for f in found]


def test_a_whole_json_flag_beside_its_sub_key_flags_is_said_dropped(catalog):  # noqa: F811
    text = _compose("    command: [example/model-7b, --speculative-config, "
                    "'{\"method\":\"ngram\",\"num_speculative_tokens\":3}', "
                    "--speculative-config.num_speculative_tokens, \"5\"]\n")
    found = [f for f in check_compose_text(text, file="x.yml", catalog=catalog) if f.rule == "argv/json-replaced"]
    assert found and found[0].severity.value == "warning" and found[0].path == "services.llm.command[1]"
    only_keys = _compose("    command: [example/model-7b, --speculative-config.method, ngram, "
                         "--speculative-config.num_speculative_tokens, \"5\"]\n")
    assert "argv/json-replaced" not in _rules(only_keys, catalog)


def test_a_multi_line_shell_script_is_the_shells_to_read_not_an_argv_item(catalog):  # noqa: F811
    text = _compose("    entrypoint: [sh, -c]\n    command:\n      - |\n"
                    "        exec vllm serve example/model-7b \\\n          --port 8000\n")
    rules = _rules(text, catalog)
    assert "argv/whitespace" not in rules and "argv/not-analysed" not in rules


def test_a_config_file_may_give_the_model(catalog):  # noqa: F811
    text = _compose("    command: [--config, /cfg/serve.yaml, --served-model-name, chat, gpt-4o]\n")
    assert "argv/model-taken-by-flag" not in _rules(text, catalog)


def test_a_plain_script_that_is_not_a_server_is_said_so_not_shell_syntax(catalog):  # noqa: F811
    found = [f for f in check_compose_text(_compose("    entrypoint: [sh, -c, /start.sh]\n"), file="x.yml",
                                           catalog=catalog) if f.rule == "argv/not-analysed"]
    assert found and "does not start a server" in found[0].message


@pytest.mark.parametrize("flag, bad", [("--enable-prefix-caching=false", True), ("--enforce-eager=1", True),
                                       ("--enable-prefix-caching", False), ("--no-enable-prefix-caching", False),
                                       ("--max-model-len=8192", False)])
def test_a_value_given_to_a_flag_that_takes_none_is_an_error(catalog, flag, bad):  # noqa: F811
    text = _compose(f"    command: [example/model-7b, \"{flag}\"]\n")
    assert (_rules(text, catalog).get("flags/bool-with-value") == "error") is bad


def _gpu_service(request: str, tp: int = 2) -> str:
    return (f"services:\n  llm:\n    image: {IMAGE}\n"
            f"    command: [example/model-7b, --tensor-parallel-size, \"{tp}\"]\n"
            "    ports:\n      - \"8000:8000\"\n    ipc: host\n" + request)


_RESERVE = "    deploy:\n      resources:\n        reservations:\n          devices:\n            - "


@pytest.mark.parametrize("request_text, short", [
    # driver: cdi with a VENDOR/CLASS=all name takes every device (moby daemon/cdi.go)
    (_RESERVE + "driver: cdi\n              device_ids: [\"nvidia.com/gpu=all\"]\n"
                "              capabilities: [gpu]\n", False),
    (_RESERVE + "driver: cdi\n              device_ids: [\"nvidia.com/gpu=0\"]\n"
                "              capabilities: [gpu]\n", True),
    # compose-go reads a quoted count as the number; -1 is all
    (_RESERVE + "driver: nvidia\n              count: \"1\"\n              capabilities: [gpu]\n", True),
    (_RESERVE + "driver: nvidia\n              count: \"2\"\n              capabilities: [gpu]\n", False),
    (_RESERVE + "driver: nvidia\n              count: -1\n              capabilities: [gpu]\n", False),
    (_RESERVE + "driver: nvidia\n              count: all\n              capabilities: [gpu]\n", False),
])
def test_gpu_count_as_compose_and_the_engine_read_it(catalog, request_text, short):  # noqa: F811
    assert ("gpu/fewer-than-parallel" in _rules(_gpu_service(request_text), catalog)) is short


def test_a_long_syntax_device_without_target_is_refused_as_compose_refuses_it(catalog):  # noqa: F811
    """`docker compose config` (v2.40.3): "service device services.llm.devices.[0] is missing a
    mount target"; with a target, or in the short syntax, the CDI device is accepted."""
    bad = _rules(_gpu_service("    devices:\n      - source: nvidia.com/gpu=all\n"), catalog)
    assert bad.get("devices/missing-target") == "error"
    for fine in ("    devices:\n      - source: nvidia.com/gpu=all\n        target: nvidia.com/gpu=all\n",
                 "    devices:\n      - nvidia.com/gpu=all\n"):
        rules = _rules(_gpu_service(fine), catalog)
        assert "devices/missing-target" not in rules and "gpu/no-device" not in rules, fine


@pytest.mark.parametrize("item, rule", [
    ("      - VLLM_API_KEY=\u201cdeploy-key-1\u201d\n", "env/list-literal-quotes"),
    ("      VLLM_API_KEY: \u201cdeploy-key-1\u201d\n", "env/literal-quotes"),
    ("      VLLM_API_KEY: \u2018deploy-key-1\u2019\n", "env/literal-quotes"),
    ("      - VLLM_API_KEY=\\\"deploy-key-1\\\"\n", "env/list-literal-quotes"),
    ("      VLLM_API_KEY: \\'deploy-key-1\\'\n", "env/literal-quotes"),
])
def test_typographic_and_escaped_quotes_reach_the_container(catalog, item, rule):  # noqa: F811
    """Neither YAML nor Compose removes typographic quotes or a backslash before a quote, and no
    shell runs: the container's value keeps them, and a client's key does not match."""
    text = _compose("    command: [example/model-7b]\n    environment:\n" + item)
    assert _rules(text, catalog).get(rule) == "error"


@pytest.mark.parametrize("item", ["      - VLLM_API_KEY=it\u2019s-a-key\n", "      VLLM_API_KEY: a\\\"b\n",
                                  "      - NAME=caf\u00e9\n"])
def test_a_quote_inside_a_value_is_not_a_wrapping_pair(catalog, item):  # noqa: F811
    text = _compose("    command: [example/model-7b]\n    environment:\n" + item)
    rules = _rules(text, catalog)
    assert not {"env/literal-quotes", "env/list-literal-quotes"} & set(rules), rules


@pytest.mark.parametrize("argv", [
    "    entrypoint: [/bin/sh, -c]\n    command: [\"VLLM_USE_V1=0 vllm serve example/model-7b\"]\n",
    "    entrypoint: [/bin/sh, -c]\n    command: [\"VLLM_USE_V1=0 exec vllm serve example/model-7b\"]\n",
    "    entrypoint: [env, VLLM_USE_V1=0, vllm, serve]\n    command: [example/model-7b]\n",
    "    entrypoint: [/usr/bin/env, A=1, VLLM_USE_V1=0, vllm, serve, example/model-7b]\n",
])
def test_a_variable_set_in_the_command_is_read_as_the_servers_environment(catalog, argv):  # noqa: F811
    """``env NAME=v`` and a shell's leading assignment set the server's environment as
    ``environment:`` does (case 34: a variable the pinned vLLM no longer reads)."""
    found = [f for f in check_compose_text(_compose(argv), file="x.yml", catalog=catalog)
             if "VLLM_USE_V1" in f.message]
    assert found and found[0].severity.value == "warning" and found[0].path.startswith("services.llm.")


def test_a_quoted_value_behind_env_reaches_the_server_quoted(catalog):  # noqa: F811
    """No shell runs an exec-form ``env``: its ``NAME="v"`` keeps the quotes; a shell's removes them."""
    bad = _compose('    entrypoint: [env, "VLLM_API_KEY=\\"k\\"", vllm, serve]\n    command: [example/model-7b]\n')
    assert _rules(bad, catalog).get("env/list-literal-quotes") == "error"
    fine = _compose("    entrypoint: [sh, -c]\n    command: [\"VLLM_API_KEY='k' exec vllm serve example/model-7b\"]\n")
    assert "env/list-literal-quotes" not in _rules(fine, catalog)


def _two_services(llm_extra: str, host: str, other: str) -> str:
    return (f"services:\n  llm:\n    image: {IMAGE}\n"
            f"    command: [example/model-7b, --host, \"{host}\"]\n{llm_extra}"
            "    deploy:\n      resources:\n        reservations:\n          devices:\n"
            "            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n"
            f"  webui:\n    image: example/webui@sha256:{'cd' * 32}\n{other}")


@pytest.mark.parametrize("llm_extra, host, other, loopback, no_ports", [
    # a sibling on the project network connects to llm's address: refused on loopback
    ("    expose: [\"8000\"]\n", "127.0.0.1", "    environment:\n      API: http://llm:8000/v1\n", True, False),
    ("", "127.0.0.1", "    ports: [\"3000:8080\"]\n", True, False),
    ("", "0.0.0.0", "    ports: [\"3000:8080\"]\n", False, False),
    # sharing llm's network namespace: the sibling reaches its loopback
    ("", "127.0.0.1", "    network_mode: service:llm\n", False, True),
    # llm in a gateway's namespace: the gateway's ports are its ports
    ("    network_mode: service:webui\n", "0.0.0.0", "    ports: [\"8000:8000\"]\n", False, False),
])
def test_loopback_and_no_ports_with_sibling_services(catalog, llm_extra, host, other, loopback, no_ports):  # noqa: F811
    rules = _rules(_two_services(llm_extra, host, other), catalog)
    assert (rules.get("server/host-loopback") == "error") is loopback
    assert ("ports/none" in rules) is no_ports


@pytest.mark.parametrize("flag, value, bad", [
    # argparse runs the type on the raw item: Python's int takes "8_000", "+8" and " 8"
    ("--max-num-seqs", "8_000", False), ("--max-num-seqs", "+8", False), ("--max-num-seqs", "8k", True),
    # choices are compared after the type ran: "+8" is the int 8
    ("--max-lora-rank", "+8", False), ("--max-lora-rank", "08", False), ("--max-lora-rank", "9", True),
    # vLLM's optional_type: "" and "None" are None (a choice of its own here)
    ("--mm-encoder-attn-dtype", "", False), ("--mm-encoder-attn-dtype", "None", False),
    ("--mm-encoder-attn-dtype", "fp16", True),
    ("--speculative-config", "None", False), ("--speculative-config", "", False),
    ("--speculative-config", "{method: ngram}", True),
    # union_dict_and_str: a text that is not JSON is a plain string
    ("--additional-config", "8k", False),
])
def test_flag_values_are_judged_as_vllms_argparse_reads_them(flag, value, bad, catalog):  # noqa: F811
    """Found by generated commands against vLLM 0.32's parser in the CPU image (every value of
    every flag that takes one: no error here where that parser accepts)."""
    item = json.dumps(f"{flag}={value}")
    found = check_compose_text(_compose(f"    command: [example/model-7b, {item}]\n"), file="x.yml", catalog=catalog)
    errors = [f.rule for f in found if f.severity.value == "error" and f.rule.startswith(("flags/", "argv/"))]
    assert bool(errors) is bad, errors
