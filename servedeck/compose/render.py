"""Render a resolved profile into docker-compose text with ``templates/docker-compose.yml.j2``.

Quoting follows servedeck's one YAML policy
(:func:`servedeck.yamlio.scalar_style`): every value a YAML 1.1 or 1.2 reader could
misread is quoted (ports, numeric or boolean-looking strings, GIDs), and so is every mapping key
(the ``key`` filter: a name is one YAML scalar, never text spliced into the document, whatever it
holds; the model checks names against :mod:`servedeck.grammar` first); served model names are
always quoted; every ``$`` is escaped as ``$$`` for Compose interpolation; one argv token per
list item; JSON-valued flags are compact JSON in one item; ports and volumes are printed by the
document model's grammar. Service keys servedeck does not model (``container.compose_extra``:
GPU device requests, healthcheck, ulimits, ...) are emitted verbatim by
:func:`servedeck.yamlio.dump_yaml` (ruamel). The template writes the service line by line: emitting the whole
document with ruamel costs about 9 ms per render (pure-Python emitter), most of the per-profile
budget of ``check --all``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from servedeck import __version__
from servedeck.fsutil import cache_dir
from servedeck.compose.document import Mount, Port
from servedeck.compose.rules._doc import Doc, DocError, parse
from servedeck.compose.service import Service, read_services
from servedeck.errors import ServedeckError
from servedeck.findings import Finding
from servedeck.model.catalog import Catalog
from servedeck.model.profile import LoadedProfile, Profile
from servedeck.yamlio import dump_yaml, scalar_text


def yaml_scalar(value: Any, force: bool = False) -> str:
    """One YAML scalar as text for a template line (the ``q`` filter): ``$`` → ``$$`` (Compose
    interpolation), then quoted by servedeck's one YAML policy
    (:func:`servedeck.yamlio.scalar_text`)."""
    return scalar_text(str(value).replace("$", "$$"), force)


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


@dataclass(frozen=True)
class Rendered:
    """A rendered profile.

    Attributes:
        profile: the resolved profile.
        command: the container command (argv tokens) of the profile's service as the file
            holds it: the one its launcher built, unless the project's template writes another.
        compose_text: the docker-compose file text (UTF-8, ends with a newline).
        profile_hash: ``sha256:<hex>`` of the resolved profile.
        doc: the compose text as the check reads it (:class:`servedeck.compose.rules._doc.Doc`:
            plain data, lines, scalar styles), parsed once for the check and the services.
        services: every service of the file as it will run
            (:func:`servedeck.compose.service.read_services`, read from the text as Compose
            reads it): the profile's own first, then the others in file order.
        service: the profile's own service among them (``container.service``): its effective
            settings and environment, with their provenance.
    """

    profile: Profile
    command: list[str]
    compose_text: str
    profile_hash: str
    doc: Doc
    services: tuple[Service, ...]
    service: Service

    @property
    def compose_sha256(self) -> str:
        """Hex sha256 of the compose text's UTF-8 bytes (what the host stores)."""
        return hashlib.sha256(self.compose_text.encode()).hexdigest()


class RenderRefused(ServedeckError):
    """A profile renders a file the check's parser refuses (:func:`servedeck.compose.rules._doc.
    parse`): ``finding`` is the parser's (``yaml/syntax``, ``yaml/duplicate-key``, ``yaml/limits``,
    ``yaml/empty``; file ``profile:NAME``, the line of the rendered text)."""

    def __init__(self, finding: Finding, template: str) -> None:
        super().__init__(f"the rendered compose file is refused: {finding.rule}: {finding.message}",
                         file=finding.file, field=f"line {finding.line}" if finding.line else None,
                         hint=f"{finding.hint or 'see the rule'}: the rendered file is the profile's values "
                              f"written by the template {template}")
        self.finding = finding


@functools.lru_cache(maxsize=8)
def _environment(search_path: tuple[str, ...]) -> jinja2.Environment:
    """One Jinja environment per template search path and process (templates compile once per
    process, and their compiled code is kept in the user cache across processes: Jinja's own
    ``FileSystemBytecodeCache``, keyed by template name and source checksum, saves a check
    process about 15 ms)."""
    bytecode_dir = cache_dir() / "jinja2"
    try:
        bytecode_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(bytecode_dir, os.W_OK):
            raise PermissionError(bytecode_dir)  # jinja would fail writing it, mid-render
        bytecode_cache = jinja2.FileSystemBytecodeCache(str(bytecode_dir))
    except OSError:
        bytecode_cache = None  # an unwritable cache only costs the compile
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(list(search_path)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False, bytecode_cache=bytecode_cache)
    env.filters["q"] = lambda v, force=False: yaml_scalar(v, force)
    env.filters["key"] = lambda k: scalar_text(str(k))  # a mapping key is one scalar, never spliced text
    return env


def render_profile(profile: Profile | LoadedProfile, catalog: Catalog,
                   templates_dir: Path | Sequence[Path], *, compose_name: str | None = None) -> Rendered:
    """Render ``profile`` to compose text with ``docker-compose.yml.j2``.

    ``compose_name``: the Compose project the file is deployed as (the host working directory's,
    :func:`servedeck.grammar.compose_project_name`), written as the top-level ``name:``; None for
    a file not placed on a host.

    Template variables: ``profile``, ``c`` (container settings), ``command``, ``ports``,
    ``volumes`` (short syntax, the model's mount first), ``named_volumes``, ``force_quote``
    (tokens always quoted: served model names), ``compose_extra`` (unmodelled service keys as
    YAML text, indented), ``profile_hash``, ``version``; the ``q`` filter (:func:`yaml_scalar`).

    ``templates_dir`` is a directory or a search path of directories (first match wins, see
    :attr:`servedeck.model.project.Project.templates_dirs`).

    Raises:
        RenderRefused: the check's parser refuses the rendered text (its finding: rule, line).
        ServedeckError: the template cannot be read, compiled or run (naming its file and line),
            or renders no service of the profile's ``container.service`` name.
    """
    if isinstance(profile, LoadedProfile):
        profile = profile.profile
    phash = profile_hash(profile)
    argv = profile.server_command(catalog)  # the launcher's; the file's own is read back below
    c, m = profile.container, profile.model
    mounts = ([Mount(m.mount, m.weights_dir, mode=m.mount_options)] if m.weights_dir and m.mount
              else [Mount(m.hf_cache.target, m.hf_cache.source, mode=m.hf_cache.options)] if m.hf_cache
              else [])
    mounts += [Mount(v.target, v.source, mode=v.options) for v in c.volumes]
    named = [v.source for v in ([m.hf_cache] if m.hf_cache else []) + list(c.volumes) if v.is_named]
    volumes = [v.short() for v in mounts]
    ports = Port(str(c.port), str(c.host_port or c.port), c.host_ip).short()
    # unmodelled service keys (file text already: no $ escaping) through the YAML dumper
    extra = dump_yaml(c.compose_extra, indent=4).rstrip("\n") if c.compose_extra else ""
    dirs = (templates_dir,) if isinstance(templates_dir, (str, Path)) else tuple(templates_dir)
    try:
        loaded = _environment(tuple(str(d) for d in dirs)).get_template(TEMPLATE)
        text = loaded.render(
            profile=profile, c=c, command=argv, volumes=volumes,
            named_volumes=named, ports=ports,
            force_quote=set(m.served_model_name), profile_hash=phash, version=__version__,
            compose_extra=extra, compose_name=compose_name)
    except Exception as exc:  # noqa: BLE001 - whatever the template's code raises (a None compared, a
        # missing key: Python's TypeError, KeyError) is the template's failure, named at its line
        raise _template_error(exc, dirs) from None
    template = loaded.filename or TEMPLATE
    if not text.endswith("\n"):
        text += "\n"
    try:  # what the file says, whatever the template: the check's reading, its services as they will run
        doc = parse(text, f"profile:{profile.name}")
    except DocError as exc:
        raise RenderRefused(exc.finding, template) from None
    services = read_services(doc.data, catalog=catalog)
    own = [s for s in services if s.name == c.service]
    if not own:
        raise ServedeckError(f"profile {profile.name} renders no service named {c.service!r} "
                             "(its container.service)", file=template,
                             hint="the template writes the profile's service under `services:` as "
                                  "`{{ c.service | key }}:`")
    return Rendered(profile=profile, command=list(own[0].command or []), compose_text=text,
                    profile_hash=phash, doc=doc, services=(own[0], *(s for s in services if s is not own[0])),
                    service=own[0])


TEMPLATE = "docker-compose.yml.j2"
"""The compose template's name, looked up on the project's template search path."""


def _template_error(exc: Exception, dirs: tuple[str | Path, ...]) -> ServedeckError:
    """The user's error for the compose template of the search path ``dirs`` that is missing,
    not UTF-8, does not compile, or fails as it runs (an undefined variable, a missing include):
    its file (the first directory that holds :data:`TEMPLATE`, as Jinja's loader takes it) and
    line named."""
    template = next((str(Path(d) / TEMPLATE) for d in dirs if (Path(d) / TEMPLATE).is_file()), TEMPLATE)
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return ServedeckError(f"the compose template does not compile: {exc.message}", file=exc.filename or template,
                              field=f"line {exc.lineno}", hint="fix the Jinja syntax at this line")
    if isinstance(exc, jinja2.TemplateNotFound):
        if template == TEMPLATE:
            return ServedeckError(f"no {TEMPLATE} on the template path {', '.join(map(str, dirs))}",
                                  hint="the project's templates/ directory, else the shipped one")
        return ServedeckError(f"the compose template includes {exc.name}, which is not found", file=template,
                              hint="put the included file beside the template")
    if isinstance(exc, UnicodeDecodeError):
        return ServedeckError(f"the compose template is not UTF-8 text ({exc.reason})", file=template,
                              hint="save the template as UTF-8")
    line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == template), None)
    return ServedeckError(f"the compose template fails as it renders: {getattr(exc, 'message', None) or exc}",
                          file=template, field=f"line {line}" if line else None,
                          hint="the template's variables are named in servedeck.compose.render.render_profile's "
                               "docstring")
