"""A power-cap sweep on the loopback fleet, interrupted mid-series, leaves the card's original cap;
so does the series guard that ``ab --interleave`` of two capped profiles runs in, interrupted or
failing.

Real: the user's command line (``invoke sweep``), Ansible, SSH, Docker, the vLLM stand-in image
(see test_fleet_loopback.py). Stand-in: the xe card's sysfs tree the host entry's ``sysfs_root``
points at (``devtools/standin_card.py``: no Intel GPU here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import pytest
from ruamel.yaml import YAML
from test_fleet_loopback import FLEET_DIR, ROOT, _profile, fleet, project, standin  # noqa: F401

from devtools.standin_card import HWMON, UW, make_card
from servedeck.host.power import read_power_state


def _cap_file(host, root) -> int:
    return int(host.read_file(f"{root}/{HWMON}/power1_max").decode().strip())


def test_interrupted_power_cap_sweep_restores_the_original_cap(project, fleet, standin, tmp_path):  # noqa: F811
    host = fleet["fleet-1"]
    scratch = f"/srv/servedeck-test/capsweep-{uuid.uuid4().hex[:8]}"
    root = make_card(host, f"{scratch}/sysfs", current_w=275, rated_max_w=300)
    yaml = YAML()
    inv = yaml.load((FLEET_DIR / "hosts.yaml").read_text())
    inv["hosts"]["fleet-1"]["sysfs_root"] = root
    inventory = tmp_path / "hosts.yaml"
    with inventory.open("w") as f:
        yaml.dump(inv, f)
    base = _profile(project, "cap-base", startup_s=1)
    args = ["sweep", "--base", base, "--hosts", "fleet-1", "--image", standin, "--no-bench",
            "--inventory", str(inventory), "--vary", "host.power_cap_w=250,200", "--reps", "3"]
    env = {**os.environ, "SERVEDECK_PROJECT": str(project)}
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[int] = set()
    try:
        try:
            deadline = time.time() + 300
            while time.time() < deadline:  # interrupt once the series has capped the card twice
                seen.add(_cap_file(host, root))
                if {250 * UW, 200 * UW} <= seen:
                    break
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert {250 * UW, 200 * UW} <= seen, (seen, out)  # the series had changed the cap
        assert proc.returncode != 0 and "interrupted" in out, out
        assert _cap_file(host, root) == 275 * UW
        assert "power limit restored" in out and "-> 275 W (as before the series)" in out, out
        state = read_power_state(host)
        assert state["applied_w"] == state["previous_w"] == 275.0  # a later rollback leaves it alone
        assert "original cap restored after sweep" in state["profile"]
        results = list((project / "runs" / "sweeps").glob("*/results/*.json"))
        assert len(results) < 3  # it really stopped mid-series
        plan = json.loads(next((project / "runs" / "sweeps").glob("*/plan.json")).read_text())
        assert plan["variables"] == {"host.power_cap_w": [250, 200]}
    finally:
        host.run(["rm", "-rf", "--", scratch], check=False)


def _capped_arm(host, root, watts):
    """What a capped arm's deploy does to the card (servedeck.deploy.apply): set the cap and
    record the replaced value in the host's power state."""
    from servedeck.host.power import apply_power_cap, read_power_limit
    limit = read_power_limit(host, sysfs_root=root)
    apply_power_cap(host, limit, watts, profile=f"cap-{watts:g}", now="2026-12-03T00:00:00Z", sysfs_root=root)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_the_series_guard_of_ab_interleave_restores_the_cap_after_an_interrupt_or_a_failure(scratch_host, stop):
    """``ab --interleave`` of two capped profiles runs inside ``power_series`` (as the sweep
    does): the arms' caps are set on the stand-in card, the series stops (Ctrl-C, or an arm's
    failure), and the cap in force before the series is back and recorded as kept."""
    from servedeck.deploy.power_series import power_series
    root = make_card(scratch_host, f"{scratch_host.workdir}/sysfs", current_w=275, rated_max_w=300)
    lines: list[str] = []
    with pytest.raises(stop), power_series([(scratch_host, SimpleNamespace(sysfs_root=root))],
                                           series="ab --interleave A B", report=lines.append) as originals:
        assert [o.watts for o in originals] == [275.0]
        _capped_arm(scratch_host, root, 230)
        _capped_arm(scratch_host, root, 160)
        assert _cap_file(scratch_host, root) == 160 * UW
        raise stop("stopped mid-series")
    assert _cap_file(scratch_host, root) == 275 * UW
    assert lines == ["scratch: power limit restored 160 W -> 275 W (as before the series)"]
    state = read_power_state(scratch_host)
    assert state["applied_w"] == state["previous_w"] == 275.0
    assert "original cap restored after ab --interleave A B" in state["profile"]


def test_a_series_that_did_not_change_the_cap_writes_nothing(scratch_host):
    from servedeck.deploy.power_series import power_series
    root = make_card(scratch_host, f"{scratch_host.workdir}/sysfs", current_w=230, rated_max_w=300)
    lines: list[str] = []
    with power_series([(scratch_host, SimpleNamespace(sysfs_root=root))], series="sweep s", report=lines.append):
        pass
    assert lines == ["scratch: power limit 230 W as before the series"]
    assert read_power_state(scratch_host) is None and _cap_file(scratch_host, root) == 230 * UW
