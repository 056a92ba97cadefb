"""Compose interpolation as the check reads it (servedeck.compose.document.interpolate): the
values a service gets when Compose reads the file with only its own defaults and its ``.env``
set; what needs the shell of whoever runs Compose stays as written.

Semantics: compose-spec ``interpolation.md``; seen with ``docker compose config`` (v2.40.3).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_check_field_faults import CASES, catalog  # noqa: F401  (the cases' image facts)

from servedeck.compose.check import CheckExpectations, check_compose_text
from servedeck.compose.document import dotenv_variables, interpolate


@pytest.mark.parametrize("text, variables, out", [
    ("${A:-x}", {}, "x"), ("${A:-x}", {"A": ""}, "x"), ("${A-x}", {"A": ""}, ""),
    ("${A-x}", {}, "x"), ("${A:-x}", {"A": "y"}, "y"), ("${A}", {"A": "y"}, "y"), ("$A/b", {"A": "y"}, "y/b"),
    ("${A:+alt}", {"A": "y"}, "alt"), ("${A:+alt}", {}, ""), ("${A+alt}", {"A": ""}, "alt"),
    ("${A:?need A}", {"A": "y"}, "y"), ("$$A", {}, "$A"), ("${A:-${B:-z}}", {}, "z"),
    ("${A:-${B}}", {"B": "b"}, "b"), ("--host=${H:-0.0.0.0}", {}, "--host=0.0.0.0"),
    ('${K:-"key"}', {}, '"key"'),
    # not resolvable without the shell: unset and no default, an error form, bad syntax
    ("${A}", {}, None), ("$A", {}, None), ("${A:?need A}", {}, None), ("${A?x}", {}, None),
    ("${A:-${B}}", {}, None), ("${A", {}, None), ("${1A}", {}, None),
])
def test_interpolate_as_compose(text, variables, out):
    assert interpolate(text, variables) == out


IMAGE = "ghcr.io/example/llm-server@sha256:69ab1604404613e831db7db77dfdbd08cca1c65e5264b8d833091da753bed4a3"


def _svc(command: str, extra: str = "", ports: str = '      - "8000:8000"\n') -> str:
    return (f"services:\n  llm:\n    image: {IMAGE}\n    command: {command}\n    ports:\n{ports}"
            "    deploy:\n      resources:\n        reservations:\n          devices:\n"
            "            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n" + extra)


def _rules(text, catalog, variables=None):  # noqa: F811
    found = check_compose_text(text, file="x.yml", catalog=catalog,
                               expect=CheckExpectations(variables=variables or {}))
    return {f.rule: f.severity.value for f in found}


@pytest.mark.parametrize("command, variables, loopback", [
    ('[example/model-7b, --host, "${VLLM_BIND:-127.0.0.1}"]', {}, True),
    ('[example/model-7b, "--host=${HOST:-localhost}"]', {}, True),
    ('[example/model-7b, --host, "${BIND}"]', {"BIND": "127.0.0.1"}, True),
    ('[example/model-7b, --host, "${BIND:-0.0.0.0}"]', {}, False),
    ('[example/model-7b, --host, "${BIND:-127.0.0.1}"]', {"BIND": "0.0.0.0"}, False),
    ('[example/model-7b, --host, "${BIND}"]', {"BIND": "0.0.0.0"}, False),
])
def test_the_server_host_is_judged_as_compose_substitutes_it(catalog, command, variables, loopback):  # noqa: F811
    rules = _rules(_svc(command), catalog, variables)
    assert (rules.get("server/host-loopback") == "error") is loopback
    assert "interpolation/unintended" not in rules  # a default or the .env: substitution is meant


def test_a_reference_only_the_shell_can_give_is_still_said(catalog):  # noqa: F811
    rules = _rules(_svc('[example/model-7b, --host, "${BIND}"]'), catalog)
    assert rules.get("interpolation/unintended") == "warning" and "server/host-loopback" not in rules


def test_an_interpolated_container_port_is_read(catalog):  # noqa: F811
    text = _svc("[example/model-7b, --host, 127.0.0.1]", ports='      - "8000:${PORT:-8000}"\n')
    assert _rules(text, catalog).get("server/host-loopback") == "error"


def test_quotes_inside_a_default_reach_the_container(catalog):  # noqa: F811
    """Compose interpolation is no shell: ``${API_KEY:-"k"}`` gives ``"k"``, quotes included."""
    for env in ('    environment:\n      - VLLM_API_KEY=${API_KEY:-"deploy-key-1"}\n',
                '    environment:\n      VLLM_API_KEY: ${API_KEY:-"deploy-key-1"}\n'):
        rules = _rules(_svc("[example/model-7b]", extra=env), catalog)
        assert {"env/literal-quotes", "env/list-literal-quotes"} & set(rules), env
    clean = _svc("[example/model-7b]", extra="    environment:\n      VLLM_API_KEY: ${API_KEY:-deploy-key-1}\n")
    assert not {"env/literal-quotes", "env/list-literal-quotes"} & set(_rules(clean, catalog))


def test_the_check_command_reads_the_files_dotenv(tmp_path):
    """``servedeck check --compose FILE`` reads FILE's directory's ``.env``, as Compose does."""
    case = (CASES / "32-server-binds-loopback.yml").read_text().replace("      - 127.0.0.1\n", "      - ${BIND}\n")
    case = case.replace(IMAGE, "vllm/vllm-openai@sha256:" + "ab" * 32)  # facts inferred from the name
    (tmp_path / "docker-compose.yml").write_text(case)
    (tmp_path / ".env").write_text("# the address\nexport BIND=127.0.0.1\nOTHER='x y'\n")
    assert dotenv_variables(tmp_path / "docker-compose.yml") == {"BIND": "127.0.0.1", "OTHER": "x y"}
    res = subprocess.run([sys.executable, "-m", "servedeck.cli", "check", "--compose", "docker-compose.yml"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert "server/host-loopback" in res.stdout + res.stderr, res.stdout + res.stderr


def _case34_with_env_file(tmp_path, env_file: str, files: dict[str, str]):
    text = (CASES / "34-env-var-removed-for-version.yml").read_text().replace(
        '      VLLM_USE_V1: "0"\n', "").replace("    environment:\n", env_file + "    environment:\n")
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    path = tmp_path / "docker-compose.yml"
    path.write_text(text)
    return path, text


@pytest.mark.parametrize("env_file", ["    env_file: vllm.env\n", "    env_file: [vllm.env]\n",
                                      "    env_file:\n      - path: ./vllm.env\n        required: true\n"])
def test_an_env_file_is_the_servers_environment_as_compose_reads_it(tmp_path, catalog, env_file):  # noqa: F811
    """``docker compose config`` puts an env_file's variables into the container's environment
    (``environment:`` overrides them): case 34's removed variable, and quotes dotenv keeps."""
    from servedeck.compose.document import env_file_variables
    from servedeck.yamlio import load_data
    path, text = _case34_with_env_file(tmp_path, env_file, {"vllm.env": "VLLM_USE_V1=0\nVLLM_API_KEY='\"k\"'\n"})
    files = env_file_variables(path, load_data(text))
    found = check_compose_text(text, file=str(path), catalog=catalog, expect=CheckExpectations(env_files=files))
    removed = [f for f in found if "VLLM_USE_V1" in f.message]
    assert removed and removed[0].severity.value == "warning" and removed[0].path.startswith("services.llm.env_file")
    assert any(f.rule == "env/list-literal-quotes" for f in found)
    # the same file, not read: not judged
    assert not [f for f in check_compose_text(text, file="x.yml", catalog=catalog) if "VLLM_USE_V1" in f.message]


def test_a_missing_required_env_file_is_an_error_from_the_check_command(tmp_path):
    path, _ = _case34_with_env_file(tmp_path, "    env_file:\n      - vllm.env\n      - path: opt.env\n"
                                              "        required: false\n", {})
    res = subprocess.run([sys.executable, "-m", "servedeck.cli", "check", "--compose", path.name],
                         cwd=tmp_path, capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert "env/file-missing" in out and "services.llm.env_file[0]" in out and "env_file[1]" not in out, out


_GPU = ("    deploy:\n      resources:\n        reservations:\n          devices:\n"
        "            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n")


def test_extends_in_the_same_file_is_merged_as_compose_merges_it(catalog):  # noqa: F811
    """`docker compose config` (v2.40.3) puts the base's GPU reservation, ports and environment on
    the service that extends it; the service's own command replaces the base's."""
    text = (f"services:\n  gpubase:\n    image: {IMAGE}\n    command: [other/model]\n    ports:\n"
            f"      - \"8000:8000\"\n    environment:\n      VLLM_USE_V1: \"0\"\n{_GPU}"
            "  llm:\n    extends: gpubase\n    command: [example/model-7b, --host, 127.0.0.1]\n")
    found = {(f.rule, f.path) for f in check_compose_text(text, file="x.yml", catalog=catalog)}
    rules = {r for r, _ in found}
    assert ("gpu/no-device", "services.llm") not in found
    assert ("server/host-loopback", "services.llm.command[2]") in found
    assert any(r == "env/not-read-by-version" and p.startswith("services.llm.") for r, p in found), rules


def test_extends_from_another_file_is_merged_when_it_was_read(tmp_path, catalog):  # noqa: F811
    from servedeck.compose.document import extends_files
    from servedeck.yamlio import load_data
    (tmp_path / "gpu.yml").write_text(f"services:\n  gpu:\n    image: {IMAGE}\n{_GPU}")
    text = ("services:\n  llm:\n    extends:\n      file: gpu.yml\n      service: gpu\n"
            "    command: [example/model-7b]\n    ports:\n      - \"8000:8000\"\n")
    path = tmp_path / "docker-compose.yml"
    path.write_text(text)
    files = extends_files(path, load_data(text))
    assert list(files) == ["gpu.yml"]
    found = check_compose_text(text, file=str(path), catalog=catalog, expect=CheckExpectations(extends_files=files))
    assert not [f for f in found if f.severity.value == "error"], [f.render() for f in found]


def test_merge_rules():
    from servedeck.compose.document import merge_service, resolve_extends
    base = {"command": ["a"], "volumes": ["/h:/m:ro", "/x:/y"], "ports": ["8000:8000"],
            "environment": ["A=1", "B=2"], "healthcheck": {"test": ["CMD", "a"], "interval": "5s"},
            "deploy": {"resources": {"reservations": {"devices": [{"count": 1}]}}}}
    local = {"command": ["b"], "volumes": ["/h2:/m"], "ports": ["8000:8000", "9000:9000"],
             "environment": {"B": "3"}, "healthcheck": {"test": ["CMD", "b"]},
             "deploy": {"resources": {"reservations": {"devices": [{"device_ids": ["0"]}]}}}}
    out = merge_service(base, local)
    assert out["command"] == ["b"] and out["volumes"] == ["/x:/y", "/h2:/m"]
    assert out["ports"] == ["8000:8000", "9000:9000"] and out["environment"] == {"A": "1", "B": "3"}
    assert out["healthcheck"] == {"test": ["CMD", "b"], "interval": "5s"}
    assert out["deploy"]["resources"]["reservations"]["devices"] == [{"count": 1}, {"device_ids": ["0"]}]
    # chains resolve bases first; a cycle or a missing base leaves the service as written
    chain = resolve_extends({"a": {"image": "i"}, "b": {"extends": "a", "x": 1}, "c": {"extends": {"service": "b"}}})
    assert chain["c"] == {"image": "i", "x": 1}
    loop = {"a": {"extends": "b", "k": 1}, "b": {"extends": "a"}, "d": {"extends": "nope", "k": 2}}
    assert resolve_extends(loop) == loop


def test_an_api_key_from_an_env_file_is_the_servers_key(tmp_path, catalog):  # noqa: F811
    """Every rule reads the environment the same way: a VLLM_API_KEY set only in an env_file
    still makes a /v1/ healthcheck without a key fail with 401."""
    from servedeck.compose.document import env_file_variables
    from servedeck.yamlio import load_data
    text = _svc("[example/model-7b]", extra=(
        "    env_file: [keys.env]\n    healthcheck:\n      test: [\"CMD\", \"curl\", \"-f\", "
        "\"http://127.0.0.1:8000/v1/models\"]\n"))
    (tmp_path / "keys.env").write_text("VLLM_API_KEY=k1\n")
    path = tmp_path / "docker-compose.yml"
    path.write_text(text)
    read = CheckExpectations(env_files=env_file_variables(path, load_data(text)))
    assert "server/healthcheck-needs-api-key" in {f.rule for f in check_compose_text(
        text, file=str(path), catalog=catalog, expect=read)}
    assert "server/healthcheck-needs-api-key" not in _rules(text, catalog)  # the file not read


def test_a_compose_file_is_checked_with_what_compose_reads_beside_it(tmp_path, catalog):  # noqa: F811
    """check_compose_file reads the file's .env, its env_file and its extends files from its one
    parse, as `servedeck check --compose FILE` does: the same findings as the text checked with
    each of them read by hand, and different ones without them."""
    from servedeck.compose.check import check_compose_file
    (tmp_path / "gpu.yml").write_text(f"services:\n  gpu:\n    image: {IMAGE}\n{_GPU}")
    (tmp_path / "keys.env").write_text("VLLM_API_KEY=k1\n")
    (tmp_path / ".env").write_text("BIND=127.0.0.1\n")
    text = ("services:\n  llm:\n    extends:\n      file: gpu.yml\n      service: gpu\n"
            "    command: [example/model-7b, --host, \"${BIND}\"]\n    ports:\n      - \"8000:8000\"\n"
            "    env_file: [keys.env]\n    healthcheck:\n      test: [\"CMD\", \"curl\", \"-f\", "
            "\"http://127.0.0.1:8000/v1/models\"]\n")
    path = tmp_path / "docker-compose.yml"
    path.write_text(text)
    read, found = check_compose_file(path, file="c.yml", catalog=catalog)
    assert read == text
    rules = {f.rule for f in found}
    assert {"server/healthcheck-needs-api-key", "server/host-loopback"} <= rules, rules
    assert "gpu/no-device" not in rules, rules
    from servedeck.compose.document import dotenv_variables, env_file_variables, extends_files
    from servedeck.yamlio import load_data
    by_hand = CheckExpectations(variables=dotenv_variables(path), env_files=env_file_variables(path, load_data(text)),
                                extends_files=extends_files(path, load_data(text)))
    assert found == check_compose_text(text, file="c.yml", catalog=catalog, expect=by_hand)
    alone = {f.rule for f in check_compose_text(text, file="c.yml", catalog=catalog)}
    assert "server/healthcheck-needs-api-key" not in alone and "server/host-loopback" not in alone, alone


@pytest.mark.parametrize("beside", ["link", "target"])
def test_a_symlinked_compose_files_env_file_and_dotenv_are_read_beside_the_link(tmp_path, beside):
    """``docker compose -f link/compose.yml`` (v2.40.3) takes the project directory from the
    path as given, not from a symlink's target: its ``.env`` and ``env_file`` files are there."""
    from servedeck.compose.check import check_compose_file
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    (tmp_path / "real" / "compose.yml").write_text(
        "services:\n  a:\n    image: busybox@sha256:" + "0" * 64 + "\n    env_file: [site.env]\n")
    (tmp_path / "link" / "compose.yml").symlink_to(tmp_path / "real" / "compose.yml")
    where = tmp_path / ("link" if beside == "link" else "real")
    (where / "site.env").write_text("A=1\n")
    (where / ".env").write_text("SITE=x\n")
    link = tmp_path / "link" / "compose.yml"
    _, findings = check_compose_file(link)
    missing = [f.rule for f in findings if f.rule == "env/file-missing"]
    assert missing == ([] if beside == "link" else ["env/file-missing"])
    assert dotenv_variables(link) == ({"SITE": "x"} if beside == "link" else {})


def test_a_dotenv_that_is_not_utf8_is_read_not_a_crash(tmp_path):
    """Compose reads ``D=\\xff`` in a ``.env``; the check reads the file on (the byte as U+FFFD)."""
    from servedeck.compose.check import check_compose_file
    (tmp_path / ".env").write_bytes(b"D=\xff\nSITE=x\n")
    (tmp_path / "compose.yml").write_text("services:\n  a:\n    image: busybox@sha256:" + "0" * 64 + "\n")
    assert dotenv_variables(tmp_path / "compose.yml") == {"D": "\ufffd", "SITE": "x"}
    check_compose_file(tmp_path / "compose.yml")
