"""A power-cap sweep on the loopback fleet, interrupted mid-series, leaves the card's original cap.

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

from ruamel.yaml import YAML
from devtools.standin_card import HWMON, UW, make_card
from test_fleet_loopback import FLEET_DIR, ROOT, _profile, fleet, project, standin  # noqa: F401

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
