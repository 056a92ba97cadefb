"""servedeck.host.power's pure part: the host report parsed, a wanted cap judged.

The host-side scripts run against the loopback host in tests/integration/test_power.py.
"""

from __future__ import annotations

import pytest

from servedeck.errors import ServedeckError
from servedeck.host.power import check_power_cap, parse_power_report

XE = "xe\t/sys/class/drm/card1/device/hwmon/hwmon4\t275000000\t300000000\t\t{probe}\n"


def test_xe_writable_in_range_is_accepted():
    limit = parse_power_report(XE.format(probe=1))
    assert (limit.interface, limit.current_w, limit.max_w, limit.writer) == ("xe-hwmon", 275.0, 300.0, "sysfs")
    assert check_power_cap(limit, 230) == []
    assert "up to 300 W" in check_power_cap(limit, 320)[0]


def test_xe_not_writable_falls_back_to_xpu_smi_then_sudo_else_a_problem():
    assert parse_power_report(XE.format(probe=0) + "tool\txpu-smi\n").writer == "xpu-smi"
    assert parse_power_report(XE.format(probe=0) + "sudo\t1\n").writer == "sudo-sysfs"
    limit = parse_power_report(XE.format(probe=0))
    assert limit.writer is None and "cannot be written by the SSH user" in check_power_cap(limit, 230)[0]


def test_two_xe_cards_are_refused_as_ambiguous():
    two = XE.format(probe=1) + XE.format(probe=1).replace("card1", "card2")
    with pytest.raises(ServedeckError, match="2 xe cards"):
        parse_power_report(two)


def test_nvidia_range_and_privilege():
    report = "tool\tnvidia-smi\nnvidia\t250.00, 100.00, 350.00, 300.00\n"
    limit = parse_power_report("root\t1\n" + report, gpu=1)
    assert (limit.current_w, limit.min_w, limit.max_w, limit.writer, limit.device) == (250.0, 100.0, 350.0,
                                                                                       "nvidia-smi", "1")
    assert "100–350 W" in check_power_cap(limit, 90)[0]
    assert "needs root" in check_power_cap(parse_power_report(report), 230)[0]


def test_no_interface():
    assert parse_power_report("") is None
    assert "no power-limit interface" in check_power_cap(None, 230, sysfs_root="/x")[0]
