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
