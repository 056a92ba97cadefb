"""A new launcher is one module and one registration.

:class:`Relay` below is a launcher servedeck does not ship, written here as a module of
``servedeck/launchers/`` would be: its own argv contract (``relay --weights PATH --listen PORT
[--threads N] -- VLLM FLAGS``), its own default port (7000) and recognition rule (an image whose
ENTRYPOINT is ``relay``, a command that gives ``--weights``, a repository named
``...relay-server``). Registered, it works through render, check, import, the A/B comparison and
the in-image dry run (skipped: the dry run cannot judge it), with nothing else changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servedeck.ab.compare import diff_views, guard, views_from_profile
from servedeck.compose.check import check_compose_text, check_in_image
from servedeck.compose.importer import dump_profile_yaml, import_compose
from servedeck.compose.render import render_profile
from servedeck.launchers import registry
from servedeck.launchers.base import Launcher, LaunchSettings, LauncherDefaults
from servedeck.launchers.server import of_arguments, start_of
from servedeck.model.catalog import Catalog, ImageFacts, infer_facts
from servedeck.model.profile import Profile, ProfileStore
from servedeck.vllm.argv import FlagSpec, flag_tokens

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "example.org/relay-server:1.4@sha256:" + "7" * 64


class Relay(Launcher):
    """``relay --weights PATH --listen PORT [--threads N] -- <vLLM flags>``: a made-up launcher
    that takes the model and the port by its own options and hands the rest to vLLM."""

    name = "relay"
    start = ("relay",)
    default_port = 7000
    options = {"weights": FlagSpec("weights"), "listen": FlagSpec("listen", "int"),
               "threads": FlagSpec("threads", "int")}
    option_fields = {"weights": "model", "listen": "port"}
    model_option = "--weights"
    serves_repo_id = False
    hints = ((("relay-server",), "cpu"),)
    tag_is_vllm_version = False

    def start_length(self, argv: list[str]) -> int:
        return 1 if argv[:1] and argv[0].rsplit("/", 1)[-1] == "relay" else 0

    def recognises_arguments(self, argv: list[str]) -> bool:
        return any(t.strip() == "--weights" or t.strip().startswith("--weights=") for t in argv)

    def build_argv(self, settings: LaunchSettings, defaults: LauncherDefaults | None = None,
                   table: object = None) -> list[str]:
        cmd = ["--weights", settings.model, "--listen", str(settings.port), "--"]
        cmd += flag_tokens("served_model_name", list(settings.served_model_name))
        for dest, value in settings.engine.items():
            cmd += flag_tokens(dest, value, table=table)
        return cmd + list(settings.extra_args)


@pytest.fixture()
def relay():
    launcher = registry.register(Relay())
    yield launcher
    registry.unregister(launcher.name)


def _profile(tmp_path: Path, name: str = "r", **engine: object) -> Path:
    profiles = tmp_path / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    lines = [f"image: {IMAGE}", "launcher: {kind: relay}",
             "model: {weights_dir: /srv/models/m, mount: /mnt/m, served_model_name: m}",
             "container: {service: relay, port: 7000, shm_size: 2g}",
             "engine:", "  max_model_len: 4096", *(f"  {k}: {v}" for k, v in engine.items())]
    (profiles / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return profiles


def _render(tmp_path: Path, name: str = "r", **engine: object):
    catalog = Catalog(tmp_path / "images.yaml")
    return render_profile(ProfileStore(_profile(tmp_path, name, **engine)).load(name), catalog, ROOT / "templates")


def test_the_registry_knows_it_and_every_recognition_rule_finds_it(relay):
    assert registry.named("relay") is relay and "relay" in registry.names()
    assert registry.of_image(["relay"]) is relay
    assert start_of(["env", "A=1", "/usr/bin/relay", "--weights", "/m"]) == (relay, 3)
    assert of_arguments(["--weights=/m", "--", "--max-model-len", "8"]) is relay
    facts = infer_facts("example.org/relay-server", "1.4")
    assert (facts.launcher, facts.device, facts.default_port, facts.vllm_version) == ("relay", "cpu", 7000, "unknown")
    assert ImageFacts(repository="x/y", launcher="relay", vllm_version="0.32.0", device="cpu").port == 7000


def test_an_unregistered_launcher_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown launcher 'relay'.*exl3xpu"):
        Profile.model_validate({"name": "x", "image": IMAGE, "launcher": {"kind": "relay"},
                                "model": {"repo_id": "o/m", "served_model_name": "m"}})


def test_render_builds_its_argv_and_the_service_reads_it_back(relay, tmp_path):
    rendered = _render(tmp_path)
    assert rendered.command == ["--weights", "/mnt/m", "--listen", "7000", "--", "--served-model-name", "m",
                                "--max-model-len", "4096"]
    svc = rendered.service
    assert svc.launcher is relay and svc.launch.served_model == "/mnt/m"
    assert svc.settings() == {"port": 7000, "served_model_name": ["m"], "max_model_len": 4096}
    port = svc.effective["port"]
    assert (port.source, port.path) == ("flag", ("services", "relay", "command", 3))
    with pytest.raises(ValueError, match="the relay launcher takes no launcher.config"):
        Profile.model_validate({"name": "x", "image": IMAGE, "launcher": {"kind": "relay", "config": "c"},
                                "model": {"weights_dir": "/a", "mount": "/m", "served_model_name": "m"}})


def test_the_check_reads_the_rendered_file_and_a_hand_written_one_through_it(relay, tmp_path):
    rendered = _render(tmp_path)
    found = check_compose_text(rendered.compose_text, file="r", catalog=Catalog(tmp_path / "images.yaml"))
    assert [f.render() for f in found if f.severity.value in ("error", "warning")] == []
    # its port option is the server's port: a file that publishes another port is a mismatch
    text = (f"services:\n  s:\n    image: {IMAGE}\n    shm_size: 2g\n    ports: ['7000:7000']\n"
            "    command: [--weights, /mnt/m, --listen, '7001', --, --max-model-len, '4096']\n")
    mismatch = [f for f in check_compose_text(text, file="x.yml") if f.rule == "ports/mismatch"]
    assert len(mismatch) == 1 and "listens on 7001 (--port 7001)" in mismatch[0].message
    # an image servedeck knows nothing about: the command's own shape names the launcher
    other = text.replace(IMAGE, "example.org/unknown@sha256:" + "8" * 64).replace("'7001'", "'7000'")
    assert "ports/mismatch" not in {f.rule for f in check_compose_text(other, file="y.yml")}


def test_import_reads_its_options_and_passes_vllm_flags_on(relay, tmp_path):
    src = tmp_path / "docker-compose.yml"
    src.write_text(f"services:\n  relay:\n    image: {IMAGE}\n    shm_size: 2g\n    ports: ['7000:7000']\n"
                   "    volumes: ['/srv/models/m:/mnt/m:ro']\n"
                   "    command: [--weights, /mnt/m, --listen, '7000', --, --max-model-len, 16K,\n"
                   "              --served-model-name, m, --enforce-eager]\n")
    mapping, notes = import_compose(src, "imported", Catalog(tmp_path / "images.yaml"))
    assert mapping["launcher"] == {"kind": "relay"}
    assert mapping["model"]["weights_dir"] == "/srv/models/m" and mapping["model"]["mount"] == "/mnt/m"
    assert mapping["engine"] == {"max_model_len": 16384, "extra_args": ["--enforce-eager"]}
    assert mapping["container"]["port"] == 7000
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "imported.yaml").write_text(dump_profile_yaml(mapping))
    again = render_profile(ProfileStore(tmp_path / "profiles").load("imported"), Catalog(tmp_path / "images.yaml"),
                           ROOT / "templates")
    assert relay.meaning(again.command) == relay.meaning(
        ["--weights", "/mnt/m", "--listen", "7000", "--", "--max-model-len", "16384", "--served-model-name", "m",
         "--enforce-eager"])
    with pytest.raises(Exception, match="no profile field for the launcher option --threads"):
        src.write_text(src.read_text().replace("--listen, '7000'", "--listen, '7000', --threads, '4'"))
        import_compose(src, "imported", Catalog(tmp_path / "images.yaml"))


def test_the_ab_comparison_names_its_settings_and_its_own_options(relay, tmp_path):
    a = _render(tmp_path / "a")
    b = _render(tmp_path / "b", max_num_batched_tokens=8192)
    diff = guard(diff_views(views_from_profile({"compose_text": a.compose_text, "effective": a.service.settings()}),
                            views_from_profile({"compose_text": b.compose_text, "effective": b.service.settings()})))
    assert diff.single_variable.name == "max_num_batched_tokens"
    assert set(diff.single_variable.views()) == {"effective", "argv"}
    threads = a.compose_text.replace('- "7000"\n', '- "7000"\n      - --threads\n      - "4"\n', 1)
    assert threads != a.compose_text
    names = {v.name for v in diff_views(views_from_profile({"compose_text": a.compose_text}),
                                        views_from_profile({"compose_text": threads})).differences}
    assert names == {"launcher.threads"}


def test_the_in_image_dry_run_skips_it_without_asking_docker(relay, tmp_path):
    rendered = _render(tmp_path)
    def judge(*args):
        raise AssertionError("the relay launcher's command was sent to the dry run")
    found = check_in_image(rendered.compose_text, file="r", judge=judge)
    assert [(f.rule, f.severity.value) for f in found] == [("inimage/skipped", "info")]
    assert "relay launcher" in found[0].message
