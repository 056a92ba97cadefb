"""The card's power limit on the loopback host, against a STAND-IN sysfs tree.

No Intel GPU exists on the test machine, so each test builds a stand-in of the xe driver's
hwmon directory (``Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon``: ``name`` = xe,
``power1_max`` and ``power1_rated_max`` in microwatts) under the scratch host's workdir and
points ``sysfs_root`` at it. Everything else is real: sshd, the POSIX scripts, the files.
"""

from __future__ import annotations

import pytest

from servedeck.errors import ServedeckError
from servedeck.host.power import (POWER_STATE, apply_power_cap, power_preflight, read_power_limit,
                                  read_power_state, restore_previous_power_cap)

UW = 1_000_000
STANDIN = "standin-sysfs"
HWMON = "class/drm/card1/device/hwmon/hwmon4"


def make_standin(host, *, current_w=275, rated_max_w=300) -> str:
    """A stand-in sysfs root on the host: one xe card plus an unrelated hwmon (acpitz)."""
    root = f"{host.workdir}/{STANDIN}"
    host.run_script(
        'set -e; r=$1; d=$r/$2\n'
        'mkdir -p "$d" "$r/class/drm/card0/device/hwmon/hwmon0"\n'
        'printf "xe\\n" > "$d/name"; printf "%s\\n" "$3" > "$d/power1_max"\n'
        'printf "%s\\n" "$4" > "$d/power1_rated_max"; printf "%s\\n" "$4" > "$d/power1_cap"\n'
        'printf "acpitz\\n" > "$r/class/drm/card0/device/hwmon/hwmon0/name"\n'
        'printf "1\\n" > "$r/class/drm/card0/device/hwmon/hwmon0/power1_max"\n',
        [root, HWMON, str(current_w * UW), str(rated_max_w * UW)])
    return root


def limit_file(host, root) -> int:
    return int(host.read_file(f"{root}/{HWMON}/power1_max").decode().strip())


def test_reads_range_and_current_of_the_xe_card_only(scratch_host):
    root = make_standin(scratch_host)
    limit = read_power_limit(scratch_host, sysfs_root=root)
    assert limit.interface == "xe-hwmon" and limit.device == f"{root}/{HWMON}"
    assert (limit.current_w, limit.max_w, limit.writer, limit.problem) == (275.0, 300.0, "sysfs", None)


def test_preflight_checks_the_allowed_range_and_changes_nothing(scratch_host):
    root = make_standin(scratch_host)
    _, problems = power_preflight(scratch_host, 320, sysfs_root=root)
    assert len(problems) == 1 and "outside the card's allowed range up to 300 W" in problems[0]
    assert power_preflight(scratch_host, 230, sysfs_root=root)[1] == []
    assert limit_file(scratch_host, root) == 275 * UW  # the write-back probe is a no-op


def test_apply_records_previous_and_restore_puts_it_back(scratch_host):
    root = make_standin(scratch_host)
    limit, problems = power_preflight(scratch_host, 230, sysfs_root=root)
    assert problems == []
    change = apply_power_cap(scratch_host, limit, 230, profile="speed", now="2026-11-30T00:00:00Z")
    assert (change["previous_w"], change["new_w"], change["writer"]) == (275.0, 230.0, "sysfs")
    assert limit_file(scratch_host, root) == 230 * UW
    state = read_power_state(scratch_host)
    assert (state["applied_w"], state["previous_w"], state["profile"]) == (230.0, 275.0, "speed")

    back = restore_previous_power_cap(scratch_host, sysfs_root=root, now="2026-11-30T00:01:00Z")
    assert (back["previous_w"], back["new_w"]) == (230.0, 275.0)
    assert limit_file(scratch_host, root) == 275 * UW
    # swapped like docker-compose.yml and .prev: a second restore goes forward again
    assert read_power_state(scratch_host)["previous_w"] == 230.0


def test_restore_without_a_recorded_change_does_nothing(scratch_host):
    root = make_standin(scratch_host)
    assert restore_previous_power_cap(scratch_host, sysfs_root=root, now="t") is None
    assert scratch_host.read_file(POWER_STATE, missing_ok=True) is None
    assert limit_file(scratch_host, root) == 275 * UW


def test_missing_permission_is_a_preflight_problem_and_nothing_is_written(scratch_host):
    root = make_standin(scratch_host)
    path = f"{root}/{HWMON}/power1_max"
    # the SSH user is root here: an immutable file stands in for a limit it may not write
    scratch_host.run(["chattr", "+i", path])
    try:
        limit, problems = power_preflight(scratch_host, 230, sysfs_root=root)
        assert limit.writer is None
        assert len(problems) == 1 and "cannot be written by the SSH user" in problems[0]
        with pytest.raises(ServedeckError, match="cannot be written"):
            apply_power_cap(scratch_host, limit, 230, profile="speed", now="t")
        assert limit_file(scratch_host, root) == 275 * UW
        assert scratch_host.read_file(POWER_STATE, missing_ok=True) is None
    finally:
        scratch_host.run(["chattr", "-i", path])


def test_no_interface_is_a_clear_problem(scratch_host):
    scratch_host.run(["mkdir", "-p", f"{scratch_host.workdir}/{STANDIN}-empty"])
    limit, problems = power_preflight(scratch_host, 230, sysfs_root=f"{scratch_host.workdir}/{STANDIN}-empty")
    assert limit is None and "no power-limit interface" in problems[0]


def test_a_deployment_without_a_cap_keeps_the_one_in_force(scratch_host):
    """A (cap 230) then B (no cap): rolling B back to A must not undo A's own 230 W."""
    from servedeck.host.power import keep_power_cap
    root = make_standin(scratch_host)
    limit, _ = power_preflight(scratch_host, 230, sysfs_root=root)
    apply_power_cap(scratch_host, limit, 230, profile="A", now="t0", sysfs_root=root)
    state = keep_power_cap(scratch_host, profile="B", now="t1")
    assert (state["applied_w"], state["previous_w"], state["profile"]) == (230.0, 230.0, "B")
    assert restore_previous_power_cap(scratch_host, now="t2") is None  # root read from the state
    assert limit_file(scratch_host, root) == 230 * UW
