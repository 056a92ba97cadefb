"""The rendered compose file is what runs: the renderer reads the file its template wrote as the
check reads any file (one parse, each service read once), and the deploy's service, command,
effective settings, secrets and environment are that reading, whatever a project's own template
writes. A file the parser refuses, a template Jinja cannot run and a text no file can hold are
clear errors naming the file (or the rendered file's finding, rule and line), never tracebacks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from servedeck.compose.check import CheckExpectations, check_compose_text, check_rendered
from servedeck.compose.positions import profile_positions
from servedeck.compose.render import RenderRefused, render_profile
from servedeck.compose.rules._doc import parse
from servedeck.compose.service import read_services
from servedeck.deploy.plan import build_plan
from servedeck.errors import ServedeckError
from servedeck.model.catalog import Catalog
from servedeck.model.profile import ProfileStore, diff_profiles

ROOT = Path(__file__).resolve().parents[2]
CATALOG = Catalog(ROOT / "deploy" / "images.yaml")
STORE = ProfileStore(ROOT / "profiles")
SHIPPED = (ROOT / "templates" / "docker-compose.yml.j2").read_text()
COMMAND_LOOP = "{%- for arg in command %}\n      - {{ arg | q(force=arg in force_quote) }}\n{%- endfor %}"
SIDECAR = "services:\n  sidecar:\n    image: busybox\n    restart: always\n    command: [sleep, infinity]\n"


def _templates(tmp_path: Path, text: str | bytes) -> Path:
    d = tmp_path / "templates"
    d.mkdir(exist_ok=True)
    f = d / "docker-compose.yml.j2"
    f.write_bytes(text) if isinstance(text, bytes) else f.write_text(text)
    return d


def _plan(rendered):
    """The deploy plan of ``rendered`` (no host: the parts the plan reads from the render)."""
    loaded = STORE.load(rendered.profile.name)
    return build_plan(loaded=loaded, profile=rendered.profile, rendered=rendered, findings=[], image=None,
                      host=None, entry=SimpleNamespace(api_host="h", ready_timeout_s=10), host_facts={},
                      state=SimpleNamespace(known_good=lambda: [], history=[]),
                      options=SimpleNamespace(timeout_s=None))


def test_the_renderer_reads_its_file_once_and_the_check_judges_that_reading():
    """For every shipped profile: the renderer's services are those of its text, the profile's
    own first; the command is the one its launcher built; the check of the rendered file finds
    what the check of its text alone finds."""
    for name in STORE.names():
        rendered = render_profile(STORE.load(name), CATALOG, ROOT / "templates")
        doc = parse(rendered.compose_text)
        assert rendered.doc.data == doc.data and rendered.doc.lines == doc.lines, name
        assert list(rendered.services) == read_services(doc.data, catalog=CATALOG), name
        assert rendered.service is rendered.services[0]
        assert rendered.service.name == rendered.profile.container.service
        assert rendered.command == rendered.profile.server_command(CATALOG), name
        assert check_rendered(rendered, CATALOG) == check_compose_text(
            rendered.compose_text, file=f"profile:{name}", catalog=CATALOG,
            expect=CheckExpectations(rendered=True)), name


@pytest.mark.parametrize("flags", [["--api-key", "templatekey0123456789"], ["--api_key=templatekey0123456789"]])
def test_a_command_the_template_writes_is_the_deploys_command_and_its_key_a_secret(tmp_path, flags):
    """A project template that adds flags after the profile's: the plan's argv, effective
    settings and secrets all hold them, and the key is redacted from what the record keeps."""
    extra = "".join(f"\n      - {json.dumps(f)}" for f in ["--max-num-seqs", "7", *flags])
    rendered = render_profile(STORE.load("speed"), CATALOG,
                              _templates(tmp_path, SHIPPED.replace(COMMAND_LOOP, COMMAND_LOOP + extra, 1)))
    assert rendered.command[-len(flags) - 2:] == ["--max-num-seqs", "7", *flags]
    plan = _plan(rendered)
    assert plan.argv == rendered.command and plan.effective["max_num_seqs"] == 7
    assert plan.api_key == "templatekey0123456789"
    assert "templatekey0123456789" not in json.dumps(plan.secrets.scrub(plan.effective))
    assert "templatekey0123456789" not in json.dumps(plan.secrets.scrub(plan.argv))


@pytest.mark.parametrize("line, from_host", [
    ("    env_file: [{path: site.env, required: false}]\n", True),
    ("    labels: {site: \"${SITE_NAME}\"}\n", True),
    ("    labels: {price: \"$$5\"}\n", False),
    ("", False),
])
def test_the_environment_comes_from_the_host_when_the_file_says_so(tmp_path, line, from_host):
    """Compose on the host adds to the server's environment when the file's service names an
    ``env_file`` or a variable: the deploy then reads the host's environment for the key."""
    text = SHIPPED.replace("    restart: {{ c.restart | q }}\n", "    restart: {{ c.restart | q }}\n" + line, 1)
    rendered = render_profile(STORE.load("speed"), CATALOG, _templates(tmp_path, text))
    assert _plan(rendered).environment_from_host is from_host


def test_a_second_service_the_template_writes_is_read_and_judged_but_never_placed_on_the_profile(tmp_path):
    loaded = STORE.load("speed")
    rendered = render_profile(loaded, CATALOG, _templates(tmp_path, SHIPPED.replace("services:\n", SIDECAR, 1)))
    assert [s.name for s in rendered.services] == [loaded.profile.container.service, "sidecar"]
    found = profile_positions(check_rendered(rendered, CATALOG), loaded, rendered)
    sidecar = [f for f in found if f.path.startswith("services.sidecar.")]
    assert sidecar, "the check judges the sidecar (an image without a digest, a restart policy)"
    assert [f for f in sidecar if f.profile_file is not None] == []
    own = [f for f in found if f.path == f"services.{loaded.profile.container.service}.restart"]
    assert own and all(f.profile_file is not None for f in own)  # the profile's own are still placed


def _parent_and_child(tmp_path: Path, name: str, parent_value: str, child_value: str) -> Path:
    """A copy of the shipped profiles with ``p-key`` (extends ``speed``) and ``c-key`` (extends
    ``p-key``) setting container variable ``name``; returns the profiles directory."""
    profiles = tmp_path / "profiles"
    shutil.copytree(ROOT / "profiles", profiles)
    (profiles / "p-key.yaml").write_text(f"extends: speed\ncontainer:\n  environment:\n    {name}: {parent_value}\n")
    (profiles / "c-key.yaml").write_text(f"extends: p-key\ncontainer:\n  environment:\n    {name}: {child_value}\n")
    return profiles


def test_the_parents_key_the_template_writes_is_kept_out_of_the_profile_diff(tmp_path):
    """A project template writes ``--api-key`` from a container variable the secret finder does
    not know by name, and only when it is set; the child unsets it. The parent's key is found
    in the parent's own rendered file, so the profile diff (which shows the parent's value of
    each changed field) never holds it; a parent that does not render gives None (its secrets
    are then read from its profile)."""
    from servedeck.deploy.plan import render_parent
    profiles = _parent_and_child(tmp_path, "SITE_ACCESS", "parentkey0123456789", '""')
    key = ('\n{%- if c.environment.SITE_ACCESS %}\n      - "--api-key"\n'
           '      - {{ c.environment.SITE_ACCESS | q }}\n{%- endif %}')
    templates = _templates(tmp_path, SHIPPED.replace(COMMAND_LOOP, COMMAND_LOOP + key, 1))
    loaded = ProfileStore(profiles).load("c-key")
    rendered = render_profile(loaded, CATALOG, templates)
    entry = SimpleNamespace(api_host="h", ready_timeout_s=10, workdir=None, place=lambda p, image=None: p)
    project = SimpleNamespace(templates_dirs=[templates])
    plan = build_plan(loaded=loaded, profile=rendered.profile, rendered=rendered, findings=[],
                      image=SimpleNamespace(facts=None), host=None, entry=entry, host_facts={},
                      state=SimpleNamespace(known_good=lambda: [], history=[]),
                      options=SimpleNamespace(timeout_s=None), catalog=CATALOG, project=project)
    parent = plan.parent_rendered
    assert parent is not None and parent.command[-2:] == ["--api-key", "parentkey0123456789"]
    assert plan.api_key is None and "--api-key" not in rendered.command  # the child serves without one
    diff = [{"path": c.path, "parent": c.old, "value": c.new}
            for c in diff_profiles(loaded.parent.profile, loaded.profile)]
    assert "parentkey0123456789" in json.dumps(diff)  # what the record would hold, unscrubbed
    assert "parentkey0123456789" not in json.dumps(plan.record_secrets.scrub(diff))
    (tmp_path / "broken").mkdir()
    broken = SimpleNamespace(templates_dirs=[_templates(tmp_path / "broken", "{{ nothing.here }}\n")])
    assert render_parent(loaded, CATALOG, broken) is None
    assert render_parent(ProfileStore(profiles).load("base"), CATALOG, project) is None  # no parent


@pytest.mark.parametrize("edit", ["leaves the environment out", "adds a sidecar holding the key"])
def test_every_service_and_the_parents_profile_give_the_records_secrets(tmp_path, edit):
    """Secrets are kept out of the record whichever reading holds them: a parent's key that its
    profile holds but its template leaves out of the file (read from the profile), and a key a
    second service of the file holds, the child's or the parent's (read from that service)."""
    profiles = _parent_and_child(tmp_path, "HF_TOKEN", "hf_parent0123456789", "hf_child0123456789")
    if edit == "leaves the environment out":
        text = SHIPPED.replace("{%- if c.environment %}", "{%- if false %}", 1)
        assert text != SHIPPED
        secret = "hf_parent0123456789"
    else:
        text = SHIPPED.replace("services:\n", "services:\n  proxy:\n    image: busybox\n    environment:\n"
                                              "      PROXY_TOKEN: side-{{ profile.name }}-0123456789\n", 1)
        secret = "side-c-key-0123456789"  # the child's sidecar; the parent's is side-p-key-...
    templates = _templates(tmp_path, text)
    loaded = ProfileStore(profiles).load("c-key")
    rendered = render_profile(loaded, CATALOG, templates)
    entry = SimpleNamespace(api_host="h", ready_timeout_s=10, workdir=None, place=lambda p, image=None: p)
    plan = build_plan(loaded=loaded, profile=rendered.profile, rendered=rendered, findings=[],
                      image=SimpleNamespace(facts=None), host=None, entry=entry, host_facts={},
                      state=SimpleNamespace(known_good=lambda: [], history=[]),
                      options=SimpleNamespace(timeout_s=None), catalog=CATALOG,
                      project=SimpleNamespace(templates_dirs=[templates]))
    record = json.dumps({"diff": [[c.path, c.old, c.new] for c in diff_profiles(loaded.parent.profile, loaded.profile)],
                         "parent file": plan.parent_rendered.compose_text, "compose": rendered.compose_text})
    assert secret in record and "hf_child0123456789" in record  # what the record would hold, unscrubbed
    kept = plan.record_secrets.scrub_text(record)
    assert secret not in kept and "hf_child0123456789" not in kept and "hf_parent0123456789" not in kept
    assert "side-p-key-0123456789" not in kept
    assert plan.api_key is None  # a sidecar's key is never the server's


def test_a_key_the_entrypoint_gives_is_the_servers_and_kept_out(tmp_path):
    """Docker runs ``entrypoint`` + ``command`` as one argv: a key a template writes into the
    entrypoint is the one readiness sends, and no record keeps it."""
    text = SHIPPED.replace("    restart: {{ c.restart | q }}\n", "    restart: {{ c.restart | q }}\n    entrypoint: "
                           "[python3, scripts/serve.py, --set, vllm.api_key=sk-entry0123456789]\n", 1)
    rendered = render_profile(STORE.load("speed"), CATALOG, _templates(tmp_path, text))
    plan = _plan(rendered)
    assert plan.effective.get("api_key") == "sk-entry0123456789"  # the launcher reads it
    assert plan.api_key == "sk-entry0123456789"
    assert "sk-entry0123456789" not in json.dumps(plan.secrets.scrub(plan.effective))
    assert "sk-entry0123456789" not in plan.secrets.scrub_yaml(rendered.compose_text)


def test_a_parent_that_fails_to_render_leaves_the_deploy_to_its_profiles_reading(tmp_path):
    """The child renders; only the parent's render raises (here: Python's own error inside the
    template): the plan is built, and the parent's secrets come from its profile."""
    from servedeck.deploy.plan import render_parent
    profiles = _parent_and_child(tmp_path, "HF_TOKEN", "hf_parent0123456789", "hf_child0123456789")
    text = SHIPPED.replace("services:\n", "{% if profile.name == 'p-key' %}{{ 1 // 0 }}{% endif %}services:\n", 1)
    templates = _templates(tmp_path, text)
    loaded = ProfileStore(profiles).load("c-key")
    rendered = render_profile(loaded, CATALOG, templates)
    project = SimpleNamespace(templates_dirs=[templates])
    assert render_parent(loaded, CATALOG, project) is None
    entry = SimpleNamespace(api_host="h", ready_timeout_s=10, workdir=None, place=lambda p, image=None: p)
    plan = build_plan(loaded=loaded, profile=rendered.profile, rendered=rendered, findings=[],
                      image=SimpleNamespace(facts=None), host=None, entry=entry, host_facts={},
                      state=SimpleNamespace(known_good=lambda: [], history=[]),
                      options=SimpleNamespace(timeout_s=None), catalog=CATALOG, project=project)
    assert plan.parent_rendered is None
    assert "hf_parent0123456789" in plan.record_secrets.values.values()


DUPLICATE = SHIPPED.replace("services:\n", "services:\n  {{ c.service | key }}:\n    image: busybox\n", 1)


def test_a_file_the_parser_refuses_is_the_checks_finding_with_its_rule_and_line(tmp_path):
    with pytest.raises(RenderRefused) as err:
        render_profile(STORE.load("speed"), CATALOG, _templates(tmp_path, DUPLICATE))
    f = err.value.finding
    assert (f.rule, f.file, f.line) == ("yaml/duplicate-key", "profile:speed", 5)
    assert "yaml/duplicate-key" in err.value.message and err.value.file == "profile:speed"
    assert err.value.field == "line 5"
    assert str(tmp_path / "templates" / "docker-compose.yml.j2") in err.value.hint


def test_the_check_command_reports_a_refused_render_as_a_finding_exit_1(tmp_path):
    for name in ("profiles", "schema", "deploy"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("images"))
    _templates(tmp_path, DUPLICATE)
    env = dict(os.environ, SERVEDECK_PROJECT=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "check", "--profile", "speed", "--json"],
                         capture_output=True, text=True, env=env)
    found = json.loads(res.stdout)
    assert [(f["rule"], f["file"], f["line"]) for f in found] == [("yaml/duplicate-key", "profile:speed", 5)]
    assert res.returncode == 1, res.stderr
    res = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), "render", "--profile", "speed"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 1 and res.stdout == "" and "yaml/duplicate-key" in res.stderr


@pytest.mark.parametrize("text, says, line", [
    ("services:\n  {% if %}\n", "does not compile", 2),
    ("services:\n\n  {{ nope }}:\n", "fails as it renders", 3),
    ("{% include 'missing.j2' %}\n", "includes missing.j2, which is not found", None),
    ("services:\n  x: {{ c.service | nofilter }}\n", "does not compile", 2),
    ("# a comment\n{% if profile.engine.max_num_seqs > 8 %}x{% endif %}\n", "fails as it renders", 2),  # None > 8
    ("services:\n  x: {{ profile.name / 2 }}\n", "fails as it renders", 2),
    ("services:\n  x: {{ {}['gone'] }}\n", "fails as it renders", 2),
])
def test_a_template_jinja_cannot_run_is_named_with_its_line(tmp_path, text, says, line):
    d = _templates(tmp_path, text)
    with pytest.raises(ServedeckError) as err:
        render_profile(STORE.load("speed"), CATALOG, d)
    assert says in err.value.message and err.value.file == str(d / "docker-compose.yml.j2")
    assert err.value.field == (f"line {line}" if line else None)


def test_a_template_that_is_not_utf8_is_named(tmp_path):
    d = _templates(tmp_path, SHIPPED.replace("# servedeck", "# caf\u00e9 servedeck", 1).encode("latin-1"))
    with pytest.raises(ServedeckError) as err:
        render_profile(STORE.load("speed"), CATALOG, d)
    assert "not UTF-8" in err.value.message and err.value.file == str(d / "docker-compose.yml.j2")


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace("  {{ c.service | key }}:", "  other:", 1), "renders no service named 'exl3xpu'"),
    (lambda t: t.replace("services:\n", "services:\n  exl3xpu: 1\nx-other:\n", 1), "renders no service named"),
])
def test_a_template_without_the_profiles_service_is_refused_naming_it(tmp_path, edit, says):
    d = _templates(tmp_path, edit(SHIPPED))
    with pytest.raises(ServedeckError) as err:
        render_profile(STORE.load("speed"), CATALOG, d)
    assert says in err.value.message and err.value.file == str(d / "docker-compose.yml.j2")


@pytest.mark.parametrize("escape", ["\\uD800", "\\udfff", "\\uDBFF\\u0041"])
def test_a_lone_surrogate_is_refused_where_it_is_written(tmp_path, escape):
    """A ``"\\uD800"`` escape gives a string no file can hold: refused at the profile's line
    (before, every render crashed in libyaml with a UnicodeEncodeError), and a text holding one
    is a ``yaml/syntax`` finding of the check, not a crash."""
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "profiles" / "odd.yaml").write_text(
        f'extends: speed\ncontainer:\n  environment:\n    WEIRD: "a{escape}b"\n')
    with pytest.raises(ServedeckError) as err:
        ProfileStore(tmp_path / "profiles").load("odd")
    assert err.value.line == 4 and "surrogate" in err.value.message
    assert str(tmp_path / "profiles" / "odd.yaml") in (err.value.file or "")
    [finding] = check_compose_text("services:\n  a:\n    image: x\n    environment: {A: \"" + chr(0xD800) + "\"}\n")
    assert finding.rule == "yaml/syntax"
