"""Render a resolved profile into docker-compose text with ``templates/docker-compose.yml.j2``.

Quoting: every value a YAML 1.1 or 1.2 reader could misread is double-quoted (ports,
numeric or boolean-looking strings, GIDs); served model names are always quoted; every
``$`` is escaped as ``$$`` for Compose interpolation; one argv token per list item;
JSON-valued flags are compact JSON in one item.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from servedeck import __version__
from servedeck.model.catalog import Catalog, ImageFacts
from servedeck.vllm.launcher import build_command
from servedeck.model.profile import LoadedProfile, Profile
from servedeck.compose.yaml11 import plain_is_string


def yaml_scalar(value: Any, force: bool = False) -> str:
    """One YAML scalar for a compose file: plain when safe, else quoted; ``$`` → ``$$``."""
    text = str(value).replace("$", "$$")
    if not force and plain_is_string(text):
        return text
    if '"' in text and "'" not in text and "\n" not in text:
        return f"'{text}'"
    return json.dumps(text, ensure_ascii=False)


def profile_hash(profile: Profile) -> str:
    """``sha256:<hex>`` of the resolved profile's canonical JSON (sorted keys, no spaces)."""
    blob = json.dumps(profile.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def _volume(source: str, target: str, options: str | None) -> str:
    return f"{source}:{target}" + (f":{options}" if options else "")


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


@functools.lru_cache(maxsize=8)
def _environment(search_path: tuple[str, ...]) -> jinja2.Environment:
    """One Jinja environment per template search path and process (templates compile once)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(list(search_path)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters["q"] = lambda v, force=False: yaml_scalar(v, force)
    return env


def render_profile(profile: Profile | LoadedProfile, catalog: Catalog,
                   templates_dir: Path | Sequence[Path]) -> Rendered:
    """Render ``profile`` to compose text.

    ``templates_dir`` is a directory or a search path of directories (first match wins, see
    :attr:`servedeck.model.project.Project.templates_dirs`).

    Raises:
        jinja2.TemplateError: when the template is broken (a bug, not user input).
    """
    if isinstance(profile, LoadedProfile):
        profile = profile.profile
    facts = catalog.lookup(profile.image_ref.digest)
    command = build_command(profile, facts)
    c = profile.container
    volumes = [_volume(profile.model.weights_dir, profile.model.mount, profile.model.mount_options)]
    volumes += [_volume(v.source, v.target, v.options) for v in c.volumes]
    named = [v.source for v in c.volumes if v.is_named]
    force_quote = set(profile.model.served_model_name)
    phash = profile_hash(profile)
    dirs = (templates_dir,) if isinstance(templates_dir, (str, Path)) else tuple(templates_dir)
    text = _environment(tuple(str(d) for d in dirs)).get_template("docker-compose.yml.j2").render(
        profile=profile, c=c, command=command, volumes=volumes, named_volumes=named,
        ports=(f"{c.host_ip}:" if c.host_ip else "") + f"{c.host_port or c.port}:{c.port}", force_quote=force_quote,
        profile_hash=phash, version=__version__)
    if not text.endswith("\n"):
        text += "\n"
    return Rendered(profile=profile, facts=facts, command=command, compose_text=text,
                    profile_hash=phash)
