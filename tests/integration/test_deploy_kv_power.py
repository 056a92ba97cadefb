"""Deploy-level: the power cap applied, recorded and rolled back; KV refusal stops preflight.

Real SSH, Docker and registry on the loopback card host, the vLLM stand-in image of
``test_deploy.py``, and a STAND-IN sysfs tree (``test_power.make_standin``: no Intel GPU here)
that the host entry's ``sysfs_root`` points at.
"""

from __future__ import annotations

import json

import pytest
from test_deploy import _deploy, _fast, _models, _variant, card, project, standin  # noqa: F401
from test_power import HWMON, UW, limit_file, make_standin

from servedeck.deploy.console import QuietReporter
from servedeck.deploy.ops import format_status, rollback, status
from servedeck.errors import DeployError
from servedeck.runs.kv_history import read_kv


@pytest.fixture
def card_with_standin_sysfs(card):  # noqa: F811
    host, entry = card
    root = make_standin(host, current_w=275, rated_max_w=300)
    return host, entry.model_copy(update={"sysfs_root": root}), root


def test_power_cap_is_applied_recorded_shown_and_rolled_back(project, card_with_standin_sysfs, standin):  # noqa: F811
    host, entry, root = card_with_standin_sysfs
    first = _fast(project, "first")
    _variant(project, "capped", "extends: first\nhost:\n  power_cap_w: 230\n")
    assert _deploy(project, (host, entry), first, standin).outcome == "ready"
    assert limit_file(host, root) == 275 * UW  # a profile without a cap leaves the card alone
    first_compose = host.read_file("docker-compose.yml")

    res = _deploy(project, (host, entry), "capped", standin)
    assert res.outcome == "ready"
    assert limit_file(host, root) == 230 * UW
    meta = json.loads((res.run.path / "run.json").read_text())
    assert (meta["power"]["previous_w"], meta["power"]["new_w"]) == (275.0, 230.0)
    # the facts hold the sustained limit found in preflight (power1_max), not the burst one
    # (power1_cap, 300 W in the stand-in tree) and not this machine's /sys
    host_facts = json.loads((res.run.path / "facts.json").read_text())["host"]
    assert host_facts["gpu_power_cap_w"] == 275.0
    assert meta["power"]["device"] == f"{root}/{HWMON}"
    kv = read_kv(res.run.path)
    assert kv is not None and kv.measured.kv_cache_tokens == res.startup["kv_cache_tokens"]

    st = status(host, entry)
    assert st["power"]["current_w"] == 230.0 and st["power"]["set_by"]["profile"] == "capped"
    assert "power limit 230 W (xe-hwmon, max 300 W)" in format_status(st)

    assert rollback(host, entry, reporter=QuietReporter(), project=project).ready
    assert host.read_file("docker-compose.yml") == first_compose
    assert limit_file(host, root) == 275 * UW


def test_out_of_range_cap_stops_in_preflight_and_the_deployment_keeps_serving(
        project, card_with_standin_sysfs, standin):  # noqa: F811
    host, entry, root = card_with_standin_sysfs
    first = _fast(project, "first")
    _variant(project, "toohigh", "extends: first\nhost:\n  power_cap_w: 320\n")
    assert _deploy(project, (host, entry), first, standin).outcome == "ready"
    before = host.read_file("docker-compose.yml")
    with pytest.raises(DeployError, match="outside the card's allowed range") as exc:
        _deploy(project, (host, entry), "toohigh", standin)
    assert "nothing was changed" in str(exc.value)
    assert host.read_file("docker-compose.yml") == before
    assert limit_file(host, root) == 275 * UW
    assert _models() == ["Qwen3.8-27B"]


def test_max_model_len_that_cannot_fit_stops_in_preflight_with_the_prediction(
        project, card_with_standin_sysfs, standin):  # noqa: F811
    host, entry, _ = card_with_standin_sysfs
    first = _fast(project, "first")
    assert _deploy(project, (host, entry), first, standin).outcome == "ready"  # calibration run
    before = host.read_file("docker-compose.yml")
    _variant(project, "huge", "extends: first\nengine:\n  max_model_len: 4194304\n")
    with pytest.raises(DeployError, match="kv/refuses-to-start") as exc:
        _deploy(project, (host, entry), "huge", standin)
    assert "4,194,304" in str(exc.value) and "KV pool" in str(exc.value)
    assert host.read_file("docker-compose.yml") == before
    assert _models() == ["Qwen3.8-27B"]
