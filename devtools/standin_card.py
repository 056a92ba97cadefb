"""A STAND-IN of an Intel xe card's sysfs on the loopback host: no Intel GPU exists here.

:func:`make_card` builds the directories and files the xe driver exposes
(``Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon``; ``drivers/gpu/drm/xe/xe_gt_freq.c``
and ``xe_gt_throttle.c``) under a directory on the host: the hwmon's ``name``, ``power1_max``,
``power1_rated_max``, ``energy1_input``, and ``device/tile0/gt0/freq0/{act_freq, rp0_freq,
throttle/status, throttle/reason_*}``. :func:`start_load` starts a small process ON THE HOST
(:data:`CARD_PY`) that gives the files the behaviour the tests need: the energy counter advances
at a known power (the load's demand, capped at ``power1_max`` as the card's PL1 limit would),
wrapping at a given modulus when asked; while the cap holds the power down, ``throttle/status``
and ``reason_pl1`` read 1 and ``act_freq`` falls in proportion. Every file is replaced by a
rename, so a reader sees the old or the new value, never a partial one.
"""

from __future__ import annotations

UW = 1_000_000
HWMON = "class/drm/card1/device/hwmon/hwmon4"
DEVICE = "class/drm/card1/device"
FREQ = f"{DEVICE}/tile0/gt0/freq0"
RP0_MHZ = 2800

CARD_PY = r'''
import os, signal, sys, time
root, demand_w, start_uj, modulus, period = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
hw = os.path.join(root, "class/drm/card1/device/hwmon/hwmon4")
fr = os.path.join(root, "class/drm/card1/device/tile0/gt0/freq0")
RP0 = 2800
def put(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{value}\n")
    os.replace(tmp, path)
def cap_w():
    try:
        with open(os.path.join(hw, "power1_max")) as f:
            v = int(f.read().strip())
        return v / 1e6 if v > 0 else None
    except (OSError, ValueError):
        return None
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
energy = float(start_uj)
last = time.time()
counter = os.path.exists(os.path.join(hw, "energy1_input"))
while True:
    now = time.time()
    cap = cap_w()
    power = demand_w if cap is None else min(demand_w, cap)
    energy += power * (now - last) * 1e6
    last = now
    if counter:
        put(os.path.join(hw, "energy1_input"), int(energy) % modulus if modulus else int(energy))
    capped = power < demand_w
    put(os.path.join(fr, "throttle/status"), int(capped))
    put(os.path.join(fr, "throttle/reason_pl1"), int(capped))
    put(os.path.join(fr, "act_freq"), int(RP0 * (power / demand_w if demand_w else 1)))
    if not os.path.exists(sys.argv[0] + ".ready"):
        open(sys.argv[0] + ".ready", "w").close()
    time.sleep(period)
'''  # noqa: E501 - a Python program run on the host: its lines are the program's


def make_card(host, root: str, *, current_w: float = 275, rated_max_w: float = 300, energy: bool = True) -> str:
    """Build the stand-in tree under ``root`` on ``host``; ``energy=False`` leaves out the
    energy counter (a card whose counter is missing). Returns ``root``."""
    host.run_script(
        'set -e; r=$1; hw=$r/$2; fr=$r/$3\n'
        'mkdir -p "$hw" "$fr/throttle" "$r/class/drm/card0/device/hwmon/hwmon0"\n'
        'printf "xe\\n" > "$hw/name"; printf "%s\\n" "$4" > "$hw/power1_max"; '
        'printf "%s\\n" "$5" > "$hw/power1_rated_max"\n'
        'printf "%s\\n" "$5" > "$hw/power1_cap"\n'
        '[ "$6" = 1 ] && printf "0\\n" > "$hw/energy1_input"\n'
        'printf "%s\\n" "$7" > "$fr/act_freq"; printf "%s\\n" "$7" > "$fr/rp0_freq"\n'
        'for f in status reason_pl1 reason_pl2 reason_thermal; do printf "0\\n" > "$fr/throttle/$f"; done\n'
        'printf "acpitz\\n" > "$r/class/drm/card0/device/hwmon/hwmon0/name"\n',
        [root, HWMON, FREQ, str(int(current_w * UW)), str(int(rated_max_w * UW)), "1" if energy else "0",
         str(RP0_MHZ)])
    return root


def start_load(host, root: str, demand_w: float, *, start_uj: int = 0, modulus: int = 0,
               period_s: float = 0.01) -> int:
    """Start :data:`CARD_PY` on the host; returns its pid (stop it with :func:`stop_load`)."""
    script = f"{root}/.standin-card.py"
    host.upload_atomic(script, CARD_PY.encode(), mode="644")
    res = host.run_script('rm -f "$1.ready"; nohup python3 "$1" "$2" "$3" "$4" "$5" "$6" </dev/null >/dev/null 2>&1 & '
                          'echo $!', [script, root, f"{demand_w:g}", str(start_uj), str(modulus), f"{period_s:g}"])
    pid = int(res.stdout.strip())
    # wait until it has written every file once (it then leaves SCRIPT.ready): a process stopped
    # just before may still write its last values, which an mtime check would take for ours
    host.run_script('for i in $(seq 1 500); do [ -e "$1.ready" ] && exit 0; sleep 0.02; done; exit 0', [script])
    return pid


def stop_load(host, pid: int) -> None:
    """Stop the stand-in's process (by its pid, checked to be ours)."""
    host.run_script('grep -q standin-card "/proc/$1/cmdline" 2>/dev/null && kill "$1"; true', [str(pid)],
                    check=False)
