"""Render a resolved profile into docker-compose text with ``templates/docker-compose.yml.j2``.

The compose document is built as data (:func:`compose_mapping`) and emitted by the compose
document model's YAML dumper (:func:`servedeck.compose.document.dump_yaml`, ruamel); the
template adds the provenance header. Quoting: every value a YAML 1.1 or 1.2 reader could
misread is quoted (ports, numeric or boolean-looking strings, GIDs); served model names are
always quoted; every ``$`` is escaped as ``$$`` for Compose interpolation; one argv token per
list item; JSON-valued flags are compact JSON in one item. Service keys servedeck does not
model (``container.compose_extra``: GPU device requests, healthcheck, ulimits, ...) follow
verbatim.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from servedeck import __version__
from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.vllm.launcher import build_command
from servedeck.model.profile import LoadedProfile, Profile
from servedeck.compose.document import Mount, Port, dump_yaml, yaml_string


def yaml_scalar(value: Any, force: bool = False) -> str:
    """One YAML scalar as text for a hand-written template line (the ``q`` filter of user
    templates): ``$`` → ``$$``, then quoted as :func:`servedeck.compose.document.yaml_string`
    decides."""
    return dump_yaml(_s(value, force)).rstrip("\n").removesuffix("\n...")


def _s(value: Any, force: bool = False) -> str:
    """A profile string for the compose file: Compose interpolation escaped (``$`` → ``$$``)."""
    return yaml_string(str(value).replace("$", "$$"), force)


#: Fields added after the first release: hashed only when set, so that a profile that does not
#: use them keeps the hash recorded by earlier runs.
_HASHED_WHEN_SET = (("model", "repo_id"), ("model", "hf_cache"), ("container", "compose_extra"))


def profile_hash(profile: Profile) -> str:
    """``sha256:<hex>`` of the resolved profile's canonical JSON (sorted keys, no spaces)."""
    data = profile.model_dump(mode="json")
    for section, key in _HASHED_WHEN_SET:
        if data[section].get(key) in (None, {}):
            data[section].pop(key, None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def compose_mapping(profile: Profile, command: list[str]) -> dict[str, Any]:
    """The compose document of ``profile`` as data for :func:`servedeck.compose.document.dump_yaml`:
    the service (modelled keys in servedeck's order, then ``container.compose_extra`` verbatim)
    and the named volumes it uses. Ports, group ids, ``shm_size`` and served model names are
    always quoted; other strings when a YAML 1.1 or 1.2 reader could misread them."""
    c, m = profile.container, profile.model
    mounts = ([Mount(m.mount, m.weights_dir, mode=m.mount_options)] if m.weights_dir and m.mount
              else [Mount(m.hf_cache.target, m.hf_cache.source, mode=m.hf_cache.options)] if m.hf_cache
              else [])
    mounts += [Mount(v.target, v.source, mode=v.options) for v in c.volumes]
    names = set(m.served_model_name)
    svc: dict[str, Any] = {"image": _s(profile.image)}
    if c.container_name:
        svc["container_name"] = _s(c.container_name)
    svc["restart"] = _s(c.restart)
    svc["ports"] = [_s(Port(str(c.port), str(c.host_port or c.port), c.host_ip).short(), True)]
    if c.devices:
        svc["devices"] = [_s(d) for d in c.devices]
    if c.group_add:
        svc["group_add"] = [_s(g, True) for g in c.group_add]
    if c.shm_size:
        svc["shm_size"] = _s(c.shm_size, True)
    if c.ipc:
        svc["ipc"] = _s(c.ipc)
    if c.environment:
        svc["environment"] = {k: _s(v) for k, v in c.environment.items()}
    if mounts:
        svc["volumes"] = [_s(v.short()) for v in mounts]
    svc["command"] = [_s(arg, arg in names) for arg in command]
    svc.update(c.compose_extra)
    doc: dict[str, Any] = {"services": {c.service: svc}}
    named = [v.source for v in ([m.hf_cache] if m.hf_cache else []) + list(c.volumes) if v.is_named]
    if named:
        doc["volumes"] = {n: {} for n in named}
    return doc


@dataclass(frozen=True)
class Rendered:
    """A rendered profile.

    Attributes:
        profile: the resolved profile.
        facts: catalog facts of its image digest, or None when unknown.
        command: the container command (argv tokens).
        compose_text: the docker-compose file text (UTF-8, ends with a newline).
        profile_hash: ``sha256:<hex>`` of the resolved profile.
    """

    profile: Profile
    facts: ImageFacts | None
    command: list[str]
    compose_text: str
    profile_hash: str

    @property
    def compose_sha256(self) -> str:
        """Hex sha256 of the compose text's UTF-8 bytes (what the host stores)."""
        return hashlib.sha256(self.compose_text.encode()).hexdigest()


def _environment(templates_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["q"] = lambda v, force=False: yaml_scalar(v, force)
    return env


def render_profile(profile: Profile | LoadedProfile, catalog: Catalog, templates_dir: Path
                   ) -> Rendered:
    """Render ``profile`` to compose text with ``templates_dir/docker-compose.yml.j2``.

    Template variables: ``compose`` (the document text, see :func:`compose_mapping`),
    ``profile``, ``command``, ``profile_hash``, ``version``; for templates that write the
    service line by line: ``c`` (container settings), ``ports``, ``volumes`` (short syntax),
    ``named_volumes``, ``force_quote`` and the ``q`` filter (:func:`yaml_scalar`).

    Raises:
        jinja2.TemplateError: when the template is broken (a bug, not user input).
    """
    if isinstance(profile, LoadedProfile):
        profile = profile.profile
    facts = catalog.lookup(profile.image_ref.digest)
    command = build_command(profile, facts)
    phash = profile_hash(profile)
    mapping = compose_mapping(profile, command)
    svc = mapping["services"][profile.container.service]
    # ``compose`` is the whole document; the other names serve a user's own template that
    # writes the service line by line with the ``q`` filter
    text = _environment(templates_dir).get_template("docker-compose.yml.j2").render(
        profile=profile, compose=dump_yaml(mapping).rstrip("\n"), command=command,
        profile_hash=phash, version=__version__, c=profile.container, ports=svc["ports"][0],
        volumes=svc.get("volumes", []), named_volumes=list(mapping.get("volumes", {})),
        force_quote=set(profile.model.served_model_name))
    if not text.endswith("\n"):
        text += "\n"
    return Rendered(profile=profile, facts=facts, command=command, compose_text=text,
                    profile_hash=phash)
