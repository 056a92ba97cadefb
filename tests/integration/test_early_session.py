"""A deploy's SSH session starts from the inventory's plain data, before pydantic validates it
(``servedeck.host.connect.open_host(..., session_soon=True)``, what ``servedeck.cli._host``
calls), against the real loopback sshd; the validated entry decides whether that session is the
one used."""

from __future__ import annotations

from pathlib import Path

import pytest

from servedeck import cli
from servedeck.errors import ServedeckError
from servedeck.host import connect

SSH_CONFIG = "/var/lib/servedeck-test/client/ssh_config"


def _inventory(tmp_path: Path, ssh: str) -> str:
    path = tmp_path / "hosts.yaml"
    path.write_text(f"hosts:\n  b70:\n    ssh: {ssh}\n    workdir: /srv/servedeck-test/early\n")
    return str(path)


def _spy(monkeypatch) -> list:
    early: list = []

    def spied(name, path):
        raw, transport = real(name, path)
        early.append(transport)
        return raw, transport

    real = connect.early_session
    monkeypatch.setattr(connect, "early_session", spied)
    return early


def test_the_session_opened_from_plain_data_is_the_one_the_deploy_uses(test_services, tmp_path,
                                                                       monkeypatch):
    early = _spy(monkeypatch)
    inv = _inventory(tmp_path, f"{{alias: sd-testhost, ssh_config: {SSH_CONFIG}}}")
    remote, entry = cli._host("b70", inv, session_soon=True)
    try:
        assert early[0] is remote.transport and remote.transport.target == entry.ssh
        assert remote.run(["echo", "ok"]).stdout.strip() == "ok"
        assert remote.transport._session is not None and remote.transport._session.alive()
    finally:
        remote.close()


def test_a_target_the_validation_reads_otherwise_gets_a_session_of_its_own(test_services, tmp_path,
                                                                          monkeypatch):
    """``port: "2222"`` is a string to the plain dataclass but 2222 to pydantic: the early
    session is dropped, and the host is reached with the validated target."""
    early = _spy(monkeypatch)
    inv = _inventory(tmp_path, f"{{alias: sd-testhost, ssh_config: {SSH_CONFIG}, port: \"2222\"}}")
    remote, entry = cli._host("b70", inv, session_soon=True)
    try:
        assert entry.ssh.port == 2222 and remote.transport.target == entry.ssh
        assert early[0] is not None and early[0] is not remote.transport and early[0]._session is None
        assert remote.run(["echo", "ok"]).stdout.strip() == "ok"
    finally:
        remote.close()


def test_an_invalid_entry_is_reported_by_the_validated_load(test_services, tmp_path):
    inv = _inventory(tmp_path, "{alias: sd-testhost, hostname: also-given}")
    with pytest.raises(ServedeckError, match="give exactly one of 'alias'") as exc:
        cli._host("b70", inv, session_soon=True)
    assert exc.value.field == "hosts.b70.ssh"
