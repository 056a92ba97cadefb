"""The preflight script (``servedeck.host.facts.PREFLIGHT_SCRIPT``) run by this machine's
``/bin/sh`` (the host side of a preflight, without SSH), and the parsing of its records."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from servedeck.errors import ServedeckError
from servedeck.host.facts import PREFLIGHT_SCRIPT, parse_facts
from servedeck.host.remote import RemoteHost, SshTarget


def _facts(workdir: Path | str, paths: list[str], port: int | None = None, sysfs: str = "/sys") -> dict:
    out = subprocess.run(["sh", "-c", PREFLIGHT_SCRIPT, "sh", str(workdir),
                          "" if port is None else str(port), "", sysfs, *paths],
                         capture_output=True, text=True, check=True).stdout
    host = RemoteHost("h", SshTarget(alias="unused"), str(workdir))  # its path rule; it connects to nothing
    return parse_facts("h", str(workdir), out, port, [(p, host.abspath(p)) for p in paths])


def test_every_kind_of_path_is_told_apart_hidden_entries_and_dangling_links_included(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / ".only").write_text("")
    (tmp_path / "dangling").mkdir()
    os.symlink("/nonexistent/target", tmp_path / "dangling" / "link")
    (tmp_path / "dots").mkdir()
    (tmp_path / "dots" / "..x").write_text("")
    (tmp_path / "file").write_text("x")
    (tmp_path / "zero").write_text("")
    given = ["empty", "empty", "hidden", "dangling", "dots", "file", "zero", "missing", "/dev/null",
             "with space", "empty"]  # a repeat, also right after itself: the records are by position
    (tmp_path / "with space").mkdir()
    facts = _facts(tmp_path, given)
    got = {p: (f["kind"], f["exists"], f["nonempty"]) for p, f in facts["paths"].items()}
    assert got == {"empty": ("dir", True, False), "hidden": ("dir", True, True),
                   "dangling": ("dir", True, True), "dots": ("dir", True, True),
                   "file": ("file", True, True), "zero": ("file", True, False),
                   "missing": (None, False, False), "/dev/null": ("other", True, True),
                   "with space": ("dir", True, False)}
    assert facts["paths"]["file"]["path"] == f"{tmp_path}/file"
    assert facts["workdir"]["exists"] is True and facts["workdir"]["free_gib"] > 0
    assert facts["hostname"] == os.uname().nodename and facts["kernel"] == os.uname().release


def test_a_missing_workdir_reports_the_free_space_of_its_nearest_parent(tmp_path):
    facts = _facts(tmp_path / "a" / "b" / "c", ["models"])
    assert facts["workdir"]["exists"] is False and facts["workdir"]["free_gib"] > 0
    assert facts["paths"]["models"]["exists"] is False
    assert facts["port"] is None and facts["image"] is None


def test_a_listening_port_is_found_in_proc_net_tcp(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert _facts(tmp_path, [], port)["port"]["listening"] is True
    assert _facts(tmp_path, [], port)["port"] == {"port": port, "listening": False, "containers": [],
                                                  "compose_workdirs": {}}


def test_output_that_is_not_the_scripts_is_an_error_naming_the_host():
    with pytest.raises(ServedeckError, match="host h: the preflight printed an unexpected line"):
        parse_facts("h", "/w", "hostname\tx\nWelcome to the host!\n", None)
    with pytest.raises(ServedeckError, match="incomplete"):
        parse_facts("h", "/w", "kernel\t6.1\n", None)


def _hwmon(root: Path, card: str, name: str, **files: str) -> Path:
    hw = root / "class" / "drm" / card / "device" / "hwmon" / "hwmon1"
    hw.mkdir(parents=True)
    (hw / "name").write_text(name + "\n")
    for f, v in files.items():
        (hw / f).write_text(v + "\n")
    return hw


def test_the_power_limit_recorded_is_the_xe_cards_sustained_one_that_servedeck_sets(tmp_path):
    """xe hwmon ``power1_max`` (PL1, what host.power sets) and ``power1_rated_max``, in watts;
    the burst limit ``power1_cap`` beside it and another driver's hwmon are not read; the tree
    is the inventory's ``sysfs_root``."""
    root = tmp_path / "sys"
    xe = _hwmon(root, "card0", "xe", power1_max="230000000", power1_rated_max="300000000",
                power1_cap="400000000")
    _hwmon(root, "card1", "amdgpu", power1_cap="120000000", power1_cap_max="150000000")
    xe2 = _hwmon(root, "card2", "xe", power1_max="0")  # limit disabled, no rated maximum
    facts = _facts(tmp_path, [], sysfs=str(root))
    assert facts["gpu_power_caps"] == [
        {"path": f"{xe}/power1_max", "cap_w": 230.0, "cap_max_w": 300.0},
        {"path": f"{xe2}/power1_max", "cap_w": 0.0, "cap_max_w": None}]
    assert _facts(tmp_path, [])["gpu_power_caps"] == []  # this machine's /sys: no xe card


def test_the_deploy_records_the_limit_the_power_reader_reads(tmp_path):
    """One reading of the card: the preflight's fact and host.power's limit agree."""
    from servedeck.host.facts import XE_HWMON_SH
    from servedeck.host.power import parse_power_report
    root = tmp_path / "sys"
    _hwmon(root, "card0", "xe", power1_max="275000000", power1_rated_max="300000000",
           power1_rated_min="100000000")
    out = subprocess.run(["sh", "-c", XE_HWMON_SH + 'sd_xe_hwmon xe "$1" 1', "sh", str(root)],
                         capture_output=True, text=True, check=True).stdout
    limit = parse_power_report(out, sysfs_root=str(root))
    fact = _facts(tmp_path, [], sysfs=str(root))["gpu_power_caps"][0]
    assert (limit.current_w, limit.max_w, limit.min_w, limit.writer) == (275.0, 300.0, 100.0, "sysfs")
    assert (fact["cap_w"], fact["cap_max_w"]) == (limit.current_w, limit.max_w)
    assert fact["path"] == f"{limit.device}/power1_max"


def test_the_compose_version_is_asked_once_per_binary_and_again_when_the_binary_changes(tmp_path):
    """``sd_compose_version`` caches the plugin's answer under its identity on the host."""
    from servedeck.host.facts import COMPOSE_SH
    plugins = tmp_path / "docker" / "cli-plugins"
    plugins.mkdir(parents=True)
    calls = tmp_path / "calls"
    binary = plugins / "docker-compose"
    binary.write_text(f'#!/bin/sh\necho run >> {calls}\n[ "$1 $2" = "version --short" ] && echo 2.40.3\n')
    binary.chmod(0o755)
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker"), "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def version() -> str:
        return subprocess.run(["sh", "-c", COMPOSE_SH + "sd_compose_version"], env=env,
                              capture_output=True, text=True, check=True).stdout

    assert version() == version() == "2.40.3\n"
    assert calls.read_text() == "run\n"  # the second answer came from the cache
    binary.write_text(binary.read_text().replace("2.40.3", "2.41.0"))  # an upgrade in place
    assert version() == "2.41.0\n" and calls.read_text() == "run\nrun\n"
    (tmp_path / "cache").chmod(0o500)  # a cache that cannot be written is no cache
    try:
        os.utime(binary, (1, 1))
        assert version() == "2.41.0\n"
    finally:
        (tmp_path / "cache").chmod(0o700)
