"""The compose document model (servedeck.compose.document): short and long syntax of ports,
volumes and devices, environment forms with Compose's quote semantics, command forms, GPU
device requests, and pass-through of every key it does not type."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from servedeck.compose.document import (Device, DeviceRequest, Environment, Mount, Port,
                                        device_requests, devices, parse_document)
from servedeck.errors import ServedeckError
from servedeck.launchers.server import split_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("item, published, target, host_ip, protocol", [
    ("8000:8000", "8000", "8000", None, None),
    ("127.0.0.1:9000:8000", "9000", "8000", "127.0.0.1", None),
    ("8000", None, "8000", None, None),
    (8000, None, "8000", None, None),
    ("8000:8000/udp", "8000", "8000", None, "udp"),
    ("[::1]:9000:8000", "9000", "8000", "::1", None),
    ("127.0.0.1::8000", None, "8000", "127.0.0.1", None),
    ({"target": 8000, "published": "9000", "host_ip": "127.0.0.1", "protocol": "tcp"},
     "9000", "8000", "127.0.0.1", "tcp"),
])
def test_ports_short_and_long(item, published, target, host_ip, protocol):
    p = Port.parse(item)
    assert (p.published, p.target, p.host_ip, p.protocol) == (published, target, host_ip, protocol)
    assert Port.parse(p.dump()) == p


def test_volumes_short_and_long():
    m = Mount.parse("/srv/m:/models/m:ro,Z")
    assert (m.source, m.target, m.read_only, m.mode, m.type) == ("/srv/m", "/models/m", True, "ro,Z", "bind")
    named = Mount.parse("hf-cache:/root/.cache/huggingface")
    assert named.is_named and named.type == "volume" and not named.read_only
    anon = Mount.parse("/data")
    assert anon.source is None and anon.target == "/data"
    long = Mount.parse({"type": "bind", "source": "/srv/m", "target": "/m", "read_only": True,
                        "bind": {"propagation": "rslave"}})
    assert long.read_only and long.extra == {"bind": {"propagation": "rslave"}}
    assert long.short() == "/srv/m:/m:ro"
    assert long.dump()["bind"] == {"propagation": "rslave"}
    with pytest.raises(ValueError):
        Mount.parse({"source": "/x"})


def test_devices_paths_and_cdi():
    assert Device.parse("/dev/dri").short() == "/dev/dri"
    d = Device.parse("/dev/dri/renderD128:/dev/dri/renderD128:rw")
    assert (d.target, d.permissions) == ("/dev/dri/renderD128", "rw")
    cdi = Device.parse("nvidia.com/gpu=GPU-5f1c2a7e")
    assert cdi.is_cdi and cdi.short() == "nvidia.com/gpu=GPU-5f1c2a7e"


def test_environment_list_form_keeps_quotes_mapping_form_does_not():
    doc = parse_document((FIXTURES / "cases" / "field-2" / "33-env-list-literal-quotes.yml").read_text())
    env = doc.service().environment
    assert env.form == "list" and env.values["VLLM_API_KEY"] == '"deploy-key-1"'
    doc = parse_document((FIXTURES / "cases" / "field-2" / "33b-env-mapping-quoted.clean.yml").read_text())
    assert doc.service().environment.values["VLLM_API_KEY"] == "deploy-key-1"
    e = Environment.parse(["A=1=2", "B", "C="])
    assert e.values == {"A": "1=2", "B": None, "C": ""}
    assert Environment.parse({"X": True, "Y": 1, "Z": None}).values == {"X": "true", "Y": "1", "Z": None}


def test_command_string_and_list():
    assert split_command("serve 'a b' --x=1") == ["serve", "a b", "--x=1"]
    assert split_command(["a", 1, None]) == ["a", "1", ""]
    assert split_command(None) is None


def test_gpu_requests_healthcheck_and_unmodelled_keys_survive_parse_and_dump():
    text = (FIXTURES / "cases" / "field-2" / "40-import-drops-gpu-reservation.yml").read_text()
    doc = parse_document(text)
    svc = doc.service()
    (req,) = svc.gpu_requests
    assert req.driver == "nvidia" and req.capabilities == ["gpu"] and len(req.device_ids) == 2
    assert svc.healthcheck["start_period"] == "900s"
    assert svc.extra["ulimits"] == {"memlock": -1, "stack": 67108864}
    again = parse_document(doc.dumps())
    assert again.dump() == doc.dump()
    assert list(again.service().dump()) == svc.order


@pytest.mark.parametrize("item, count, nvidia", [
    ({"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}, 2, True),
    ({"driver": "nvidia", "count": "2"}, 2, True),          # compose-go reads a quoted number
    ({"driver": "nvidia", "count": "all"}, None, True),
    ({"driver": "nvidia", "count": -1}, None, True),        # Docker Engine: -1 is every GPU
    ({"capabilities": ["gpu"], "device_ids": ["0", "1", "2"]}, 3, True),
    ({"driver": "cdi", "device_ids": ["intel.com/gpu=all"]}, None, False),
    ({"driver": "cdi", "device_ids": ["intel.com/gpu=0"]}, 1, False),
    ({"driver": "cdi", "capabilities": ["gpu"], "device_ids": ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]}, 2, True),
])
def test_a_device_request_counts_gpus_as_compose_and_the_engine_read_it(item, count, nvidia):
    req = DeviceRequest.parse(item)
    assert (req.gpu_count, req.is_nvidia) == (count, nvidia)


def test_device_requests_come_from_deploy_and_gpus_with_their_paths():
    svc = {"deploy": {"resources": {"reservations": {"devices": [{"count": 1}, "junk"]}}},
           "gpus": [{"driver": "nvidia", "count": 2}]}
    found = device_requests(svc)
    assert [(p, r.gpu_count) for p, r in found] == [
        (("deploy", "resources", "reservations", "devices", 0), 1), (("gpus", 0), 2)]
    ((path, every),) = device_requests({"gpus": "all"})
    assert path == ("gpus",) and every.gpu_count is None and every.is_nvidia


def test_the_devices_compose_reads_are_read_once_and_every_rule_sees_the_same_entries():
    """One reading of a service's ``devices`` (strings, and mappings with a string source),
    carried by the service model with their paths; the gpu and devices rules read it."""
    from servedeck.compose.check import check_compose_text
    from servedeck.compose.service import Service
    data = {"image": "img", "devices": ["/dev/dri/card0", 7, {"source": 3}, {"source": "/dev/dri/renderD128"},
                                        {"source": "/dev/kfd", "target": "/dev/kfd"}, "nvidia.com/gpu=all"],
            "gpus": [{"count": 1}]}
    assert [(i, d.source, d.long) for i, d in devices(data)] == [
        (0, "/dev/dri/card0", False), (3, "/dev/dri/renderD128", True), (4, "/dev/kfd", True),
        (5, "nvidia.com/gpu=all", False)]
    assert devices({"devices": "/dev/dri"}) == [] and devices({}) == []
    svc = Service.read("s", data, None)
    assert [p for p, _ in svc.devices] == [("services", "s", "devices", i) for i in (0, 3, 4, 5)]
    assert [p for p, _ in svc.device_requests] == [("services", "s", "gpus", 0)]
    # the long entry without a target is reported at its own index, however many entries precede it
    text = ("services:\n  s:\n    image: img\n    devices:\n      - 7\n      - /dev/kfd\n"
            "      - source: /dev/dri/renderD128\n")
    missing = [f for f in check_compose_text(text) if f.rule == "devices/missing-target"]
    assert [(f.path, f.line) for f in missing] == [("services.s.devices[2]", 7)]


@pytest.mark.parametrize("text, source, cdi", [
    ("nvidia.com/gpu=all", "nvidia.com/gpu=all", True),
    ("intel.com/gpu=0", "intel.com/gpu=0", True),
    ("/dev/dri/renderD128:/dev/dri/renderD128:rwm", "/dev/dri/renderD128", False),
    ("/dev/a=b", "/dev/a=b", False),                         # a path with '=' is not a CDI name
])
def test_a_device_entry_is_a_cdi_name_only_when_qualified(text, source, cdi):
    d = Device.parse(text)
    assert (d.source, d.is_cdi) == (source, cdi)


def test_errors_name_the_entry():
    with pytest.raises(ServedeckError, match="no services"):
        parse_document("version: '3'\n")
    with pytest.raises(ServedeckError) as exc:
        parse_document("services:\n  a:\n    ports:\n      - {published: 1}\n", file="f.yml")
    assert exc.value.field == "services.a.ports[0]" and exc.value.file == "f.yml"
    with pytest.raises(ServedeckError) as exc:
        parse_document("services:\n  a: [\n", file="f.yml")
    assert exc.value.field.startswith("line ")


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True).returncode == 0


def _config(path: Path) -> dict:
    out = subprocess.run(["docker", "compose", "-f", str(path), "-p", "doc", "config", "--format", "json",
                          "--no-interpolate"], capture_output=True, text=True, cwd=path.parent)
    return {"refused": out.stderr.strip()} if out.returncode else json.loads(out.stdout)


@pytest.mark.skipif(not _has_compose(), reason="Compose v2 not installed")
@pytest.mark.parametrize("src", sorted([*FIXTURES.glob("compose/*.yml"),
                                        *(p for p in FIXTURES.glob("cases/field-2/*.yml")
                                          if not p.name.endswith(".meta.yml"))]),
                         ids=lambda p: p.name)
def test_parse_then_dump_is_the_same_document_for_compose(src: Path, tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "docker-compose.yml").write_text(src.read_text())
    (tmp_path / "b" / "docker-compose.yml").write_text(parse_document(src.read_text()).dumps())
    a, b = _config(tmp_path / "a" / "docker-compose.yml"), _config(tmp_path / "b" / "docker-compose.yml")
    for doc, d in ((a, "a"), (b, "b")):
        for svc in doc.get("services", {}).values():
            for vol in svc.get("volumes", []):
                vol["source"] = vol.get("source", "").replace(str(tmp_path / d), "<dir>")
        doc.pop("name", None)
    assert a == b
