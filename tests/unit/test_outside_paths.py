"""Nothing read from outside is trusted as a path: run ids from a host's history or a fleet
host's result file, profile names from the command line or an ``extends:``, host names from an
inventory are checked against their grammar before any file is opened or created."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servedeck.deploy.record import mark_abandoned
from servedeck.errors import ServedeckError
from servedeck.model.profile import ProfileStore
from servedeck.runs import store


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "outside" / "victim"
    victim.mkdir(parents=True)
    (victim / "run.json").write_text(json.dumps({"run_id": "0001-x-y", "outcome": "started"}))
    return victim


@pytest.mark.parametrize("run_id", ["../outside/victim", "../../outside/victim", "/abs/0001-x-y",
                                    "0001-x/../../outside/victim", "..", "", None, 7, "0001-x\n-y"])
def test_a_run_id_from_a_hosts_history_never_reaches_outside_the_run_store(tmp_path, run_id):
    runs = tmp_path / "project" / "runs"
    runs.mkdir(parents=True)
    victim = _victim(tmp_path)
    before = (victim / "run.json").read_bytes()
    assert mark_abandoned(runs, run_id, "its client died") is False
    assert store.recorded_run(runs, run_id) is None
    with pytest.raises(ServedeckError, match="is not a run id"):
        store.run_path(runs, run_id)
    assert (victim / "run.json").read_bytes() == before


def test_a_run_id_is_one_name():
    assert store.run_path("runs", "0042-speed-b70") == Path("runs/0042-speed-b70")
    assert store.RUN_ID_RE.match("0001-cpu-4096-card1.example.com")


@pytest.mark.parametrize("name", ["../../x", "../profiles/base", "/etc/passwd", "base/../base", "Base", ""])
def test_a_profile_name_is_checked_before_any_file_is_opened(tmp_path, name):
    (tmp_path / "profiles").mkdir()
    outside = tmp_path / "x.yaml"
    outside.write_text("hostile: [")  # would be a YAML error if it were ever read
    with pytest.raises(ServedeckError) as exc:
        ProfileStore(tmp_path / "profiles").load(name)
    assert "is not a profile name" in exc.value.message


def test_an_extends_outside_the_profiles_directory_is_refused_as_a_name(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "x.yaml").write_text("hostile: [")
    (tmp_path / "profiles" / "child.yaml").write_text("extends: ../x\n")
    with pytest.raises(ServedeckError) as exc:
        ProfileStore(tmp_path / "profiles").load("child")
    assert "'../x' is not a profile name" in exc.value.message
    assert exc.value.file.endswith("child.yaml") and exc.value.field == "extends"


@pytest.mark.parametrize("host", ["a/b", "../up", ".hidden", "a b"])
def test_a_host_name_that_cannot_name_a_run_is_an_error_not_a_traceback(tmp_path, host):
    with pytest.raises(ServedeckError, match="host name"):
        store.create_run(tmp_path / "runs", "base", host)
    assert not (tmp_path / "runs").exists()


def test_an_inventory_host_name_with_a_slash_is_an_error_naming_it(tmp_path):
    from servedeck.model.inventory import load_inventory
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  lab/b70:\n    ssh: {hostname: h}\n    workdir: /srv/x\n")
    with pytest.raises(ServedeckError) as exc:
        load_inventory(inv)
    assert "host name 'lab/b70' is not valid" in exc.value.message and exc.value.file == str(inv)
