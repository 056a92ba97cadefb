"""Shell code servedeck runs on a card host (servedeck.host.facts), run here with the local
``sh`` against fake programs that print how they were called."""

from __future__ import annotations

import subprocess


def _compose_fn(tmp_path, plugin_dirs: list[str], config: str | None = None) -> str:
    """Run COMPOSE_SH's sd_compose with a fake HOME and a fake `docker` on PATH; both print
    what they were run as."""
    from servedeck.host.facts import COMPOSE_SH
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / ".docker").mkdir(parents=True)
    bin_dir.mkdir()
    if config is not None:
        (home / ".docker" / "config.json").write_text(config)
    fake = bin_dir / "docker"
    fake.write_text('#!/bin/sh\necho "docker $*"\n')
    fake.chmod(0o755)
    for d in plugin_dirs:
        plugin = home / d / "docker-compose"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text('#!/bin/sh\necho "plugin $*"\n')
        plugin.chmod(0o755)
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(["sh", "-c", COMPOSE_SH + 'sd_compose "$@"', "sh", "up", "-d", "a b"],
                          env=env, capture_output=True, text=True, check=True).stdout


def test_compose_runs_the_cli_plugin_binary_when_the_docker_cli_would_find_it_first(tmp_path) -> None:
    assert _compose_fn(tmp_path, [".docker/cli-plugins"]) == "plugin up -d a b\n"


def test_compose_is_docker_compose_without_the_plugin_in_a_known_place_or_with_extra_dirs(tmp_path) -> None:
    assert _compose_fn(tmp_path / "none", []) == "docker compose up -d a b\n"
    extra = '{"cliPluginsExtraDirs": ["/opt/plugins"]}'
    assert _compose_fn(tmp_path / "extra", [".docker/cli-plugins"], extra) == "docker compose up -d a b\n"
