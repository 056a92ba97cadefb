"""``status`` says where servedeck's records and what the host runs disagree (issue 28: after a
switch raced its own rollback, a ``<id>_<name>`` container was left Created and ``status`` said
"no drift"; a run recorded failed while its new deployment served)."""

from __future__ import annotations

from servedeck.deploy.ops import contradictions

A, B = "a" * 64, "b" * 64


def _rev(n: int, outcome: str, sha: str, event: str = "deploy", profile: str = "p") -> list[dict]:
    return [{"revision": n, "event": event, "outcome": "started", "compose_sha256": sha, "profile": profile},
            {"revision": n, "outcome": outcome}]


def test_records_that_agree_with_the_host_say_nothing():
    history = _rev(1, "ready", A) + _rev(2, "failed", B) + _rev(3, "ready", A, "rollback")
    assert contradictions(history, A, serving=True, containers=[("sd", "running")]) == []
    # the switch changed nothing (a full disk): the failed revision's file is not installed
    assert contradictions(_rev(1, "ready", A) + _rev(2, "failed", B), A, serving=True,
                          containers=[("sd", "running")]) == []
    # a failed deploy left as it is (--no-rollback) that does not serve is what the record says
    assert contradictions(_rev(1, "ready", A) + _rev(2, "failed", B), B, serving=False,
                          containers=[("sd", "exited")]) == []
    assert contradictions([], None, serving=None, containers=[]) == []


def test_a_leftover_container_of_a_raced_switch_is_named():
    lines = contradictions(_rev(1, "ready", A), A, serving=True,
                           containers=[("sd", "running"), ("0f1e2d3c4b5a_sd", "created")])
    assert len(lines) == 1 and "2 containers" in lines[0] and "0f1e2d3c4b5a_sd created" in lines[0]


def test_a_revision_recorded_failed_while_its_file_serves_is_named():
    for outcome in ("failed", "interrupted", "abandoned"):
        (line,) = contradictions(_rev(1, "ready", A) + _rev(2, outcome, B, profile="new"), B, serving=True,
                                 containers=[("sd", "running")])
        assert f"revision 2 (deploy of new) ended {outcome}" in line and "serves" in line


def test_a_ready_revision_whose_file_was_replaced_is_named():
    (line,) = contradictions(_rev(1, "ready", A), B, serving=True, containers=[("sd", "running")])
    assert "revision 1 (deploy of p) serves" in line and B[:12] in line and A[:12] in line


def _state(history: list[dict], installed: str):
    from servedeck.host.remote import HostState
    return HostState(lock="acquired", compose_sha256=installed, good={A, B}, history=history)


class _Host:
    name = "b70"


def test_rollback_restores_the_installed_known_good_file_when_its_last_switch_did_not_end_ready():
    """The issue's case: deploy B interrupted, the automatic rollback to A met a half-done
    Compose and failed; A is installed and nothing serves. ``rollback`` restores A (it refused:
    "none other than the current one served")."""
    from servedeck.deploy.ops import _rollback_target
    history = _rev(1, "ready", A, profile="good") + _rev(2, "interrupted", B, profile="new") \
        + _rev(3, "failed", A, "rollback", profile="good")
    assert _rollback_target(_Host(), _state(history, A), None).number == 1
    # A installed and serving (its revision ended ready): the other known-good file, B
    history = _rev(1, "ready", B) + _rev(2, "ready", A) + _rev(3, "failed", B)  # 3 changed nothing
    assert _rollback_target(_Host(), _state(history, A), None).number == 1
