"""The one typed model of a Compose document: services, ports, volumes, devices, environment,
command/entrypoint, GPU device requests, healthcheck; parse and dump.

Format: the Compose Specification (compose-spec/compose-spec ``spec.md`` and
``05-services.md``, ``deploy.md``; as implemented by compose-go v2): ``ports`` short syntax
``[HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]`` and long syntax (``target``, ``published``,
``host_ip``, ``protocol``, ``mode``, ``name``, ``app_protocol``); ``volumes`` short syntax
``SOURCE:TARGET[:MODE]`` and long syntax (``type``, ``source``, ``target``, ``read_only``,
``bind``, ``volume``, ...); ``devices`` ``HOST:CONTAINER[:PERMISSIONS]`` or a CDI name
(``vendor.com/class=name``) or long syntax; ``environment`` as a mapping (YAML removes the
quotes of a quoted scalar) or as a list of ``KEY=VALUE`` strings (everything after the first
``=`` is the value, quote characters included: no shell removes them), ``KEY`` alone takes the
value from the shell; ``command``/``entrypoint`` as a list (one argv item each) or a string
(split shell-style by Compose); ``deploy.resources.reservations.devices`` device requests
(``driver``, ``count``, ``device_ids``, ``capabilities``, ``options``); variable
interpolation (``$VAR``, ``${VAR...}``, ``$$``: :func:`interpolation_refs`).

Reading is YAML 1.2 with ruamel.yaml (round trip); every key the model does not type is kept
verbatim in ``extra`` and dumped back unchanged, so parse then dump loses nothing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from servedeck.errors import ServedeckError
from servedeck.launchers.base import EnvItem
from servedeck.launchers.server import split_command
from servedeck.yamlio import LIMITS, YAMLError, dump_yaml, load_data, to_plain, syntax_error_at

_PORT_RE = re.compile(r"^(?:(?P<ip>\[[^\]]+\]|[^:]*):)??(?:(?P<published>[^:]*):)?(?P<target>[^:]+)$")


# --------------------------------------------------------------------------- ports

@dataclass
class Port:
    """One published port.

    Attributes:
        target: container port (or range) as text, e.g. ``"8000"``.
        published: host port (or range) as text; None = Docker picks one.
        host_ip: host address to bind (``127.0.0.1``); None = all addresses.
        protocol: ``tcp``/``udp``; None = tcp.
        extra: further long-syntax keys (``mode``, ``name``, ``app_protocol``).
        long: True when written in long syntax.
    """

    target: str
    published: str | None = None
    host_ip: str | None = None
    protocol: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    long: bool = False

    @classmethod
    def parse(cls, item: Any) -> "Port":
        """Short (``"127.0.0.1:8080:8000/tcp"``, ``8000``) or long syntax (mapping).

        Raises:
            ValueError: not a port entry.
        """
        if isinstance(item, dict):
            item = to_plain(item)
            if "target" not in item:
                raise ValueError("a long-syntax port needs target")
            rest = {k: v for k, v in item.items() if k not in ("target", "published", "host_ip", "protocol")}
            pub = item.get("published")
            return cls(str(item["target"]), None if pub is None else str(pub),
                       item.get("host_ip"), item.get("protocol"), rest, long=True)
        text = str(item)
        proto = None
        if "/" in text:
            text, proto = text.rsplit("/", 1)
        m = _PORT_RE.match(text)
        if not m:
            raise ValueError(f"{item!r} is not [HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]")
        ip = m["ip"]
        if ip and ip.startswith("["):
            ip = ip[1:-1]
        return cls(m["target"], m["published"] or None, ip or None, proto)

    def short(self) -> str:
        """Short syntax text (``host_ip:published:target[/protocol]``)."""
        host_ip = f"[{self.host_ip}]" if self.host_ip and ":" in self.host_ip else self.host_ip
        parts = [p for p in (host_ip, self.published) if p is not None]
        if host_ip and self.published is None:
            parts.append("")
        text = ":".join([*parts, self.target])
        return text + (f"/{self.protocol}" if self.protocol else "")

    def dump(self) -> Any:
        """The entry as written (long syntax kept long)."""
        if not self.long:
            return self.short()
        out: dict[str, Any] = {"target": _num(self.target)}
        if self.published is not None:
            out["published"] = self.published
        if self.host_ip:
            out["host_ip"] = self.host_ip
        if self.protocol:
            out["protocol"] = self.protocol
        return {**out, **self.extra}


def _num(text: str) -> Any:
    return int(text) if text.isdigit() else text


# --------------------------------------------------------------------------- volumes

@dataclass
class Mount:
    """One ``volumes`` entry of a service.

    Attributes:
        target: container path.
        source: host path, named volume, or None (anonymous volume).
        read_only: ``ro`` / ``read_only: true``.
        mode: the short-syntax mode text as written (``ro``, ``Z``, ``ro,Z``), None when absent.
        type: ``bind``/``volume``/``tmpfs``/... (long syntax; short syntax: inferred).
        extra: further long-syntax keys (``bind``, ``volume``, ``tmpfs``, ``consistency``).
        long: True when written in long syntax.
    """

    target: str
    source: str | None = None
    read_only: bool = False
    mode: str | None = None
    type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    long: bool = False

    @property
    def is_named(self) -> bool:
        """A named volume (source is not a path)."""
        return self.source is not None and not self.source.startswith(("/", ".", "~", "$"))

    @classmethod
    def parse(cls, item: Any) -> "Mount":
        """Short (``/srv/m:/models:ro``) or long syntax (mapping).

        Raises:
            ValueError: not a volume entry.
        """
        if isinstance(item, dict):
            item = to_plain(item)
            if "target" not in item:
                raise ValueError("a long-syntax volume needs target")
            rest = {k: v for k, v in item.items() if k not in ("type", "source", "target", "read_only")}
            return cls(str(item["target"]), item.get("source"), bool(item.get("read_only", False)),
                       None, item.get("type"), rest, long=True)
        text = str(item)
        parts = text.split(":")
        # Windows drive letters are not supported (Linux hosts only)
        if len(parts) == 1:
            return cls(parts[0], type="volume")
        source, target, *mode = parts
        mode_text = ":".join(mode) or None
        ro = bool(mode_text) and "ro" in (mode_text or "").split(",")
        kind = "volume" if not source.startswith(("/", ".", "~", "$")) else "bind"
        return cls(target, source, ro, mode_text, kind)

    def short(self) -> str:
        """Short syntax ``source:target[:mode]`` (``ro`` added for a long-syntax read_only)."""
        if self.source is None:
            return self.target
        mode = self.mode if self.mode is not None else ("ro" if self.read_only else None)
        return f"{self.source}:{self.target}" + (f":{mode}" if mode else "")

    def dump(self) -> Any:
        """The entry as written (long syntax kept long)."""
        if not self.long:
            return self.short()
        out: dict[str, Any] = {}
        if self.type:
            out["type"] = self.type
        if self.source is not None:
            out["source"] = self.source
        out["target"] = self.target
        if self.read_only:
            out["read_only"] = True
        return {**out, **self.extra}


# --------------------------------------------------------------------------- devices

@dataclass
class Device:
    """One ``devices`` entry: a host device path mapping or a CDI device name.

    Attributes:
        source: host path (``/dev/dri``) or the CDI name (``nvidia.com/gpu=all``).
        target: container path (None: same as source; always None for CDI).
        permissions: ``rwm`` subset, if given.
        long: True when written in long syntax.
    """

    source: str
    target: str | None = None
    permissions: str | None = None
    long: bool = False

    @property
    def is_cdi(self) -> bool:
        """A CDI device name (``vendor.com/class=name``, :func:`is_cdi_name`), not a path."""
        return is_cdi_name(self.source)

    @classmethod
    def parse(cls, item: Any) -> "Device":
        """Read the short syntax ``SOURCE[:TARGET[:PERMISSIONS]]`` or a CDI name (compose-go
        ``loader`` v2: a qualified CDI name is kept whole), or the long syntax mapping (plain
        data, as the checked document, :func:`servedeck.yamlio.to_plain` and the YAML file
        readers give it)."""
        if isinstance(item, dict):
            return cls(str(item.get("source", "")), item.get("target"), item.get("permissions"), long=True)
        text = str(item)
        if is_cdi_name(text):
            return cls(text)
        parts = text.split(":")
        return cls(parts[0], parts[1] if len(parts) > 1 else None,
                   parts[2] if len(parts) > 2 else None)

    def short(self) -> str:
        return ":".join(p for p in (self.source, self.target, self.permissions) if p)

    def dump(self) -> Any:
        if not self.long:
            return self.short()
        out = {"source": self.source}
        if self.target:
            out["target"] = self.target
        if self.permissions:
            out["permissions"] = self.permissions
        return out


@dataclass
class DeviceRequest:
    """One GPU device request: an entry of ``deploy.resources.reservations.devices`` or of
    ``gpus`` (Compose Specification ``deploy.md`` "devices", ``05-services.md`` "gpus").

    Attributes:
        capabilities: e.g. ``["gpu"]``. driver: ``nvidia``, ``cdi``, ... (None: not given).
        count: as written: an int, ``"all"``, a quoted number, or None.
        device_ids: GPU indices, UUIDs or (``driver: cdi``) CDI names; None when absent.
        options: driver options. extra: other keys.
    """

    capabilities: list[str] = field(default_factory=list)
    driver: str | None = None
    count: int | str | None = None
    device_ids: list[str] | None = None
    options: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, item: Any) -> "DeviceRequest":
        """Read one request mapping (plain data, as :meth:`Device.parse`); anything but a mapping
        reads as an empty request."""
        if not isinstance(item, dict):
            item = {}
        ids = item.get("device_ids")
        caps = item.get("capabilities")
        known = ("capabilities", "driver", "count", "device_ids", "options")
        return cls([str(c) for c in caps] if isinstance(caps, list) else [], item.get("driver"),
                   item.get("count"),
                   None if ids is None else [str(i) for i in ids] if isinstance(ids, list) else [str(ids)],
                   item.get("options"), {k: v for k, v in item.items() if k not in known})

    @property
    def is_nvidia(self) -> bool:
        """True when the request goes to NVIDIA's driver: ``driver: nvidia``, no driver (Docker's
        default device driver for ``capabilities: [gpu]``), or the ``gpu`` capability."""
        return str(self.driver or "nvidia").lower() == "nvidia" or "gpu" in self.capabilities

    @property
    def gpu_count(self) -> int | None:
        """How many GPUs the request takes; None for all of them (``all``, ``-1``, a CDI
        ``VENDOR/CLASS=all`` id) or a count that is not a number.

        compose-go reads a quoted number as the number (``"1"`` → 1); Docker Engine takes
        ``-1`` as all GPUs (moby ``api/types/container`` ``DeviceRequest.Count``).
        """
        if self.device_ids is not None:
            every = any(is_cdi_name(n) and n.endswith("=all") for n in self.device_ids)
            return None if every else len(self.device_ids)
        count = self.count
        if isinstance(count, str) and re.fullmatch(r"\s*-?\d+\s*", count):
            count = int(count)
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
        return None


def devices(service: dict[str, Any]) -> list[tuple[int, Device]]:
    """The ``devices`` entries of one service mapping Compose reads as devices, each with its
    index: a string (short syntax, CDI name) or a mapping with a string ``source`` (long syntax).
    Other entries, and a ``devices`` that is not a list, are left out (the schema reports them)."""
    items = service.get("devices")
    return [(i, Device.parse(item)) for i, item in enumerate(items if isinstance(items, list) else [])
            if isinstance(item, str) or isinstance(item, dict) and isinstance(item.get("source"), str)]


def device_requests(service: dict[str, Any]) -> list[tuple[tuple[str | int, ...], DeviceRequest]]:
    """The GPU device requests of one service mapping, each with its key path under the
    service: ``deploy.resources.reservations.devices`` entries, then ``gpus`` entries (``gpus:
    all`` reads as one NVIDIA request for all GPUs, as compose-go's ``gpus`` loader does).

    Entries that are not mappings are skipped (the schema reports them). Example item:
    ``(("deploy", "resources", "reservations", "devices", 0), DeviceRequest(...))``.
    """
    out: list[tuple[tuple[str | int, ...], DeviceRequest]] = []
    deploy = service.get("deploy")
    res = deploy.get("resources") if isinstance(deploy, dict) else None
    res = res.get("reservations") if isinstance(res, dict) else None
    devs = res.get("devices") if isinstance(res, dict) else None
    for i, d in enumerate(devs if isinstance(devs, list) else []):
        if isinstance(d, dict):
            out.append((("deploy", "resources", "reservations", "devices", i), DeviceRequest.parse(d)))
    gpus = service.get("gpus")
    if gpus == "all":
        out.append((("gpus",), DeviceRequest(driver="nvidia", count="all")))
    for i, d in enumerate(gpus if isinstance(gpus, list) else []):
        if isinstance(d, dict):
            out.append((("gpus", i), DeviceRequest.parse(d)))
    return out


def is_cdi_name(text: str) -> bool:
    """True for a CDI fully qualified device name ``vendor.com/class=name`` (CDI spec
    ``SPEC.md`` v0.6 "Fully qualified device name")."""
    kind, eq, _ = text.partition("=")
    return bool(eq) and "/" in kind and "." in kind.split("/", 1)[0] and not text.startswith("/")


# --------------------------------------------------------------------------- environment, command

@dataclass
class Environment:
    """A service's ``environment``.

    Attributes:
        values: name → value (None: taken from the shell running Compose). List form keeps
            quote characters in the value (``VLLM_API_KEY="k"`` → ``"k"`` with quotes).
        form: ``mapping`` or ``list`` (as written).
    """

    values: dict[str, str | None] = field(default_factory=dict)
    form: str = "mapping"

    @classmethod
    def parse(cls, value: Any) -> "Environment":
        if value is None:
            return cls()
        if isinstance(value, dict):
            return cls({str(k): None if v is None else _env_text(v) for k, v in value.items()})
        out: dict[str, str | None] = {}
        for item in value:
            name, sep, val = str(item).partition("=")
            out[name] = val if sep else None
        return cls(out, "list")

    def dump(self) -> Any:
        if self.form == "list":
            return [k if v is None else f"{k}={v}" for k, v in self.values.items()]
        return dict(self.values)


def _env_text(value: Any) -> str:
    """A mapping value as Compose passes it: YAML booleans become ``true``/``false``."""
    value = to_plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ----------------------------------------------------------------------------- interpolation

_VAR_NAME = re.compile(r"[_A-Za-z][_A-Za-z0-9]*")


def _scan(text: str) -> Iterator[tuple[str, str, str, str]]:
    """The pieces of ``text`` as Compose's interpolation reads it, in order: ``("text", s, "", "")``
    (``$$`` gives ``"$"``), ``("ref", NAME, OP, ARG)`` for ``$NAME`` / ``${NAME}`` (OP ``""``) and
    ``${NAME<OP>ARG}`` (OP one of ``:-`` ``-`` ``:?`` ``?`` ``:+`` ``+``, ARG unparsed), and a
    last ``("bad", FRAGMENT, "", "")`` at the first invalid ``$`` use."""
    i, n = 0, len(text)
    while i < n:
        j = text.find("$", i)
        if j < 0:
            yield "text", text[i:], "", ""
            return
        if j > i:
            yield "text", text[i:j], "", ""
        i = j
        nxt = text[i + 1] if i + 1 < n else ""
        if nxt == "$":
            yield "text", "$", "", ""
            i += 2
            continue
        if nxt != "{":
            m = _VAR_NAME.match(text, i + 1)
            if not m:
                yield "bad", text[i:i + 2], "", ""
                return
            yield "ref", m.group(0), "", ""
            i = m.end()
            continue
        depth, j = 1, i + 2
        while j < n and depth:
            if text[j] == "{" and text[j - 1] == "$":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth:
            yield "bad", text[i:], "", ""
            return
        inner = text[i + 2:j - 1]
        m = _VAR_NAME.match(inner)
        rest = inner[m.end():] if m else ""
        op = rest[:2] if rest[:2] in (":-", ":?", ":+") else rest[:1]
        if not m or (rest and op not in ("-", "?", "+", ":-", ":?", ":+")):
            yield "bad", text[i:j], "", ""
            return
        yield "ref", m.group(0), op, rest[len(op):]
        i = j


def interpolation_refs(text: str) -> tuple[list[str], str | None]:
    """Variables Compose would substitute in ``text``, and the first invalid ``$`` use (or None).

    Source: compose-spec ``interpolation.md`` (``$VAR``, ``${VAR}``, ``${VAR:-default}``,
    ``${VAR-default}``, ``${VAR:?err}``, ``${VAR?err}``, ``${VAR:+alt}``, ``${VAR+alt}``, ``$$``).
    """
    refs: list[str] = []
    for kind, name, _, _ in _scan(text):
        if kind == "bad":
            return refs, name
        if kind == "ref":
            refs.append(name)
    return refs, None


def interpolate(text: str, variables: Mapping[str, str]) -> str | None:
    """``text`` as Compose substitutes it with ``variables`` set (and nothing else), or None when
    a reference cannot be resolved that way (a variable not in ``variables`` without a default,
    a ``${VAR?err}`` form, or invalid syntax): then what Compose gives depends on the shell of
    whoever runs it.

    Source: compose-spec ``interpolation.md`` (``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``
    default when unset or empty, ``${VAR-default}`` when unset, ``${VAR:?err}``, ``${VAR?err}``,
    ``${VAR:+alt}``, ``${VAR+alt}``; defaults may hold references themselves, as in compose-go
    ``template/template.go`` v2).
    """
    out: list[str] = []
    for kind, name, op, arg in _scan(text):
        if kind == "bad":
            return None
        if kind == "text":
            out.append(name)
            continue
        value = variables.get(name)
        unset = value is None or (op.startswith(":") and value == "")
        if op in ("", "?", ":?"):
            if (op and unset) or value is None:
                return None
            sub: str | None = value
        elif op.endswith("-"):
            sub = interpolate(arg, variables) if unset else value
        else:  # + : the alternative when set
            sub = "" if unset else interpolate(arg, variables)
        if sub is None:
            return None
        out.append(sub)
    return "".join(out)


def interpolated(value: Any, variables: Mapping[str, str]) -> Any:
    """:func:`interpolate` applied to every string of a plain value (mappings keep their keys);
    a string that cannot be resolved is kept as written."""
    if isinstance(value, str):
        if "$" not in value:
            return value
        done = interpolate(value, variables)
        return value if done is None else done
    if isinstance(value, dict):
        return {k: interpolated(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolated(v, variables) for v in value]
    return value


def dotenv_variables(compose_file: Path) -> dict[str, str]:
    """The variables of the ``.env`` file in ``compose_file``'s directory as given (Compose's
    project directory by default, compose-spec ``env-file``/"project directory"; a symlink's own
    directory, not its target's, as ``docker compose -f`` v2.40.3 takes it), read by python-dotenv
    without substituting references; empty when there is none. Names without a value are left
    out (Compose reads them from the shell)."""
    env = compose_file.absolute().parent / ".env"
    return _read_dotenv(env) if env.is_file() else {}


def _read_dotenv(path: Path) -> dict[str, str]:
    """A dotenv file's ``NAME=value`` pairs (python-dotenv, references not substituted; names
    without a value left out). Bytes that are not UTF-8 read as U+FFFD (Compose reads such a
    file; a value holding one is not one the check judges by)."""
    import io

    from dotenv import dotenv_values
    text = path.read_bytes().decode("utf-8", errors="replace")
    return {k: v for k, v in dotenv_values(stream=io.StringIO(text), interpolate=False).items() if v is not None}


def env_file_paths(value: Any) -> list[tuple[tuple[str | int, ...], str, bool]]:
    """A service's ``env_file`` → (its document path under the service: ``("env_file",)`` or
    ``("env_file", i)``, path as written, required) per entry: a string, a list of strings, or
    long-syntax items ``{path, required}`` (compose-spec ``05-services.md`` ``env_file``;
    ``required`` defaults to true)."""
    if isinstance(value, str):
        return [(("env_file",), value, True)]
    out: list[tuple[tuple[str | int, ...], str, bool]] = []
    for i, item in enumerate(value if isinstance(value, list) else []):
        if isinstance(item, str):
            out.append((("env_file", i), item, True))
        elif isinstance(item, dict) and isinstance(item.get("path"), str):
            out.append((("env_file", i), item["path"], item.get("required", True) is not False))
    return out


def env_items(service: dict[str, Any], path: tuple[str | int, ...],
              env_files: Mapping[str, Mapping[str, str] | None]) -> list[EnvItem]:
    """The environment a service mapping (at document path ``path``) gives the container, in
    order (a later item overrides an earlier one): its ``env_file`` files (their variables in
    ``env_files``, by the path as written; a file not there adds nothing), then its
    ``environment`` (mapping or list form; compose-spec ``05-services.md`` ``environment``).
    The ``NAME=value`` words its argv sets follow them
    (:func:`servedeck.launchers.server.read_server`)."""
    out = [EnvItem(k, v, path + where, True) for where, file, _ in env_file_paths(service.get("env_file"))
           for k, v in (env_files.get(file) or {}).items()]
    env = service.get("environment")
    base = path + ("environment",)
    if isinstance(env, dict):
        for k, v in env.items():
            out.append(EnvItem(str(k), None if v is None else str(v), base + (str(k),), False))
    elif isinstance(env, list):
        for i, item in enumerate(env):
            if isinstance(item, str):
                k, eq, v = item.partition("=")
                out.append(EnvItem(k, v if eq else None, base + (i,), True))
    return out


def env_file_variables(compose_file: Path, data: Any) -> dict[str, dict[str, str] | None]:
    """Every ``env_file`` the services of ``data`` (a parsed compose document) name, read as
    Compose reads it: relative to ``compose_file``'s directory as given (the project directory;
    ``~`` expanded, as Compose v2.40.3 expands it for ``env_file``), dotenv
    syntax (python-dotenv, references not substituted). Returns path as written → its variables,
    or None for a file that cannot be read (Compose refuses a missing required file)."""
    out: dict[str, dict[str, str] | None] = {}
    services = data.get("services") if isinstance(data, dict) else None
    for svc in (services or {}).values():
        if not isinstance(svc, dict):
            continue
        for _, name, _ in env_file_paths(svc.get("env_file")):
            if name in out:
                continue
            path = compose_file.absolute().parent / Path(name).expanduser()
            out[name] = _read_dotenv(path) if path.is_file() else None
    return out


_REPLACED = ("command", "entrypoint")
"""Service keys a merge replaces instead of appending to (compose-spec ``13-merge.md``)."""


def _volume_target(item: Any) -> Any:
    if isinstance(item, dict):
        return item.get("target")
    if isinstance(item, str):
        parts = item.split(":")
        return parts[1] if len(parts) > 1 else parts[0]
    return item


def _as_mapping(value: Any) -> dict[str, Any] | None:
    """``environment`` / ``labels`` in either form as a mapping (``K=V`` → ``{K: V}``, a bare
    ``K`` → ``{K: None}``), or None for anything else."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {k: (v if eq else None) for k, eq, v in (item.partition("=") for item in value)}
    return None


def merge_service(base: dict[str, Any], local: dict[str, Any], key: str = "") -> dict[str, Any]:
    """``local`` merged over ``base`` as Compose merges a service with the one it ``extends``
    (compose-spec ``13-merge.md``): mappings merged entry by entry, sequences appended,
    ``command``/``entrypoint``/``healthcheck.test`` replaced, ``volumes`` unique by target and
    ``ports`` by value, ``environment``/``labels`` merged by name whichever form each side uses.
    Plain values (no ruamel nodes) in, a new mapping out."""
    out = dict(base)
    for k, v in local.items():
        if k not in out or k in _REPLACED or (key == "healthcheck" and k == "test"):
            out[k] = v
            continue
        old = out[k]
        if k in ("environment", "labels", "annotations") and not key:
            a, b = _as_mapping(old), _as_mapping(v)
            out[k] = {**a, **b} if a is not None and b is not None else v
        elif isinstance(old, dict) and isinstance(v, dict):
            out[k] = merge_service(old, v, k)
        elif isinstance(old, list) and isinstance(v, list):
            if k == "volumes" and not key:
                targets = {_volume_target(x) for x in v}
                out[k] = [x for x in old if _volume_target(x) not in targets] + v
            else:
                out[k] = old + [x for x in v if not (k == "ports" and x in old)]
        else:
            out[k] = v
    return out


def resolve_extends(services: dict[str, Any], files: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every service of ``services`` with its ``extends`` (``NAME``, ``{service: NAME}`` or
    ``{file: F, service: NAME}``) merged in (:func:`merge_service`), bases first, as Compose
    reads it. ``files``: other compose documents by the path the ``file`` key gives; a base that
    cannot be found (unknown service, a file not in ``files``, a cycle) leaves the service as
    written."""
    files = files or {}

    def base_of(spec: Any, pool: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, Any]] | None:
        name = spec if isinstance(spec, str) else spec.get("service") if isinstance(spec, dict) else None
        if not isinstance(name, str):
            return None
        if isinstance(spec, dict) and isinstance(spec.get("file"), str):
            doc = files.get(spec["file"])
            other = doc.get("services") if isinstance(doc, dict) else None
            if not isinstance(other, dict):
                return None
            pool = other
        found = pool.get(name)
        return (found, name, pool) if isinstance(found, dict) else None

    def resolve(svc: dict[str, Any], pool: dict[str, Any], seen: tuple[int, ...]) -> dict[str, Any] | None:
        spec = svc.get("extends")
        if spec is None:
            return svc
        hit = base_of(spec, pool)
        if hit is None or id(hit[0]) in seen:
            return None
        base = resolve(hit[0], hit[2], seen + (id(hit[0]),))
        if base is None:
            return None
        merged = merge_service(base, {k: v for k, v in svc.items() if k != "extends"})
        merged.pop("extends", None)
        return merged

    out = {}
    for name, svc in services.items():
        done = resolve(svc, services, (id(svc),)) if isinstance(svc, dict) else None
        out[name] = svc if done is None else done
    return out


@dataclass(frozen=True)
class Unreadable:
    """A file a compose document names that Compose refuses to read; ``reason`` says why, as
    one line. What Compose v2.40.3 says of such files: "open F: no such file or directory",
    "read F: is a directory", "failed to parse F: ..." (a YAML error, a duplicate key, bytes
    that are not UTF-8)."""

    reason: str


def extends_files(compose_file: Path, data: Any) -> dict[str, Any]:
    """The other compose documents the services of ``data`` extend (``extends: {file: F}``),
    read as Compose reads them: F with ``$$`` read as ``$``, relative to the directory of
    ``compose_file`` as given (a symlink's own directory, not its target's; ``~`` is not
    expanded for ``extends``), parsed as the check parses a compose file (Compose's ``!reset``
    and ``!override`` tags included).

    Returns:
        F as written → its parsed data, or :class:`Unreadable` for a file Compose refuses to
        read. Left out, so their bases are not judged: a name with a variable (the shell that
        runs Compose may set it, over the ``.env``), and a file servedeck does not read although
        Compose may (beyond :data:`servedeck.yamlio.LIMITS`, several YAML documents, UTF-16 or
        UTF-32, not a regular file).
    """
    out: dict[str, Any] = {}
    services = data.get("services") if isinstance(data, dict) else None
    for svc in (services or {}).values():
        spec = svc.get("extends") if isinstance(svc, dict) else None
        raw = spec.get("file") if isinstance(spec, dict) else None
        if not isinstance(raw, str) or raw in out:
            continue
        refs, bad = interpolation_refs(raw)
        if refs or bad:
            continue  # a variable: the shell that runs Compose may set it, over the .env too
        name = interpolate(raw, {})  # only $$ left: a literal $
        if name is None:
            continue
        found = _read_extended(compose_file.absolute().parent / name)
        if isinstance(found, Unreadable) and not Path(name).is_absolute():
            found = Unreadable(f"{found.reason}; relative to the compose file's directory")
        if found is not None:
            out[raw] = found
    return out


_UTF16_32_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def _read_extended(path: Path) -> Any:
    """The data of the compose file at ``path`` (``{}`` when it is empty), :class:`Unreadable`,
    or None when servedeck does not read it (see :func:`extends_files`)."""
    import stat

    from servedeck.compose.rules._doc import DocError, parse
    from servedeck.fsutil import read_bounded_bytes
    from servedeck.yamlio import LIMITS
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return Unreadable(exc.strerror or type(exc).__name__)
    if stat.S_ISDIR(mode):
        return Unreadable("is a directory")
    if not stat.S_ISREG(mode):
        return None  # a FIFO blocks the reader (Compose's too)
    try:
        raw = read_bounded_bytes(path, LIMITS.max_bytes, what="compose")
    except (OSError, ServedeckError):
        return None  # larger than servedeck reads, or gone meanwhile
    if raw.startswith(_UTF16_32_BOMS):
        return None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Unreadable(f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}")
    try:
        return parse(text, str(path)).data
    except DocError as exc:
        finding = exc.finding
        if finding.rule == "yaml/empty":
            return {}
        if finding.rule == "yaml/limits" or "another document" in finding.message:
            return None
        return Unreadable(finding.message + (f" at line {finding.line}" if finding.line else ""))


def literal_values(value: Any) -> Any:
    """Compose text values → the values a container gets, for a string or the strings nested
    in a mapping/list (keys kept): ``$$`` is a literal ``$`` (compose-spec
    ``interpolation.md``), and ``docker compose config`` prints every literal ``$`` so. Apply
    to text without variables (see :func:`interpolation_refs`) or to Compose's own output."""
    if isinstance(value, str):
        return value.replace("$$", "$")
    if isinstance(value, dict):
        return {k: literal_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal_values(v) for v in value]
    return value


# --------------------------------------------------------------------------- service, document

#: Service keys the model types; every other key lands in :attr:`ServiceDefinition.extra`.
TYPED_KEYS = ("image", "command", "entrypoint", "environment", "ports", "volumes", "devices")


@dataclass
class ServiceDefinition:
    """One service definition as written (Compose Specification's term), typed; the service as
    it will run, with its launcher and effective settings, is
    :class:`servedeck.compose.service.Service`, read from the plain mapping.

    Attributes:
        name: service name.
        image: image reference, None when absent.
        command / entrypoint: argv items (None: the image's); ``command_form`` /
            ``entrypoint_form`` say ``list`` or ``string`` as written.
        environment: see :class:`Environment`.
        ports, volumes, devices: typed entries in order.
        extra: every other key verbatim (plain values), in the file's order; includes
            ``deploy``, ``healthcheck``, ``ulimits``, ``gpus``, ``restart``, ...
        order: the service's keys as written (dump keeps it).
    """

    name: str
    image: str | None = None
    command: list[str] | None = None
    command_form: str = "list"
    entrypoint: list[str] | None = None
    entrypoint_form: str = "list"
    environment: Environment = field(default_factory=Environment)
    ports: list[Port] = field(default_factory=list)
    volumes: list[Mount] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    @property
    def gpu_requests(self) -> list[DeviceRequest]:
        """The service's GPU requests (:func:`device_requests`), without their paths."""
        return [r for _, r in device_requests(self.extra)]

    @property
    def healthcheck(self) -> dict[str, Any] | None:
        """The ``healthcheck`` mapping (``test``, ``interval``, ...), None when absent."""
        hc = self.extra.get("healthcheck")
        return hc if isinstance(hc, dict) else None

    @classmethod
    def parse(cls, name: str, data: Any, where: str = "") -> "ServiceDefinition":
        """Parse one service mapping.

        Raises:
            ServedeckError: a malformed port/volume entry (field = its path).
        """
        data = to_plain(data) if isinstance(data, dict) else {}
        base = where or f"services.{name}"
        svc = cls(name, order=list(data))
        for key, value in data.items():
            if key == "image":
                svc.image = None if value is None else str(value)
            elif key in ("command", "entrypoint"):
                setattr(svc, key, split_command(value))
                setattr(svc, f"{key}_form", "string" if isinstance(value, str) else "list")
            elif key == "environment":
                svc.environment = Environment.parse(value)
            elif key in ("ports", "volumes", "devices"):
                kind: Any = {"ports": Port, "volumes": Mount, "devices": Device}[key]
                items = []
                for i, item in enumerate(value or []):
                    try:
                        items.append(kind.parse(item))
                    except ValueError as exc:
                        raise ServedeckError(f"{key} entry {item!r}: {exc}", field=f"{base}.{key}[{i}]") from None
                setattr(svc, key, items)
            else:
                svc.extra[key] = value
        return svc

    def dump(self) -> dict[str, Any]:
        """The service mapping (keys in the original order, new typed keys appended)."""
        typed: dict[str, Any] = {}
        if self.image is not None:
            typed["image"] = self.image
        for key in ("command", "entrypoint"):
            argv = getattr(self, key)
            if argv is not None:
                typed[key] = (shlex.join(argv) if getattr(self, f"{key}_form") == "string" else list(argv))
        if self.environment.values or "environment" in self.order:
            typed["environment"] = self.environment.dump()
        for key in ("ports", "volumes", "devices"):
            items = getattr(self, key)
            if items or key in self.order:
                typed[key] = [i.dump() for i in items]
        out: dict[str, Any] = {}
        for key in self.order:
            if key in typed:
                out[key] = typed.pop(key)
            elif key in self.extra:
                out[key] = self.extra[key]
        out.update(typed)
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


@dataclass
class Document:
    """A compose document.

    Attributes:
        services: name → :class:`ServiceDefinition`, in order.
        extra: top-level keys other than ``services`` (``volumes``, ``networks``, ``x-*``, ...)
            verbatim.
        file: where it was read from (for messages), if known.
    """

    services: dict[str, ServiceDefinition] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    file: str | None = None

    def service(self, name: str | None = None) -> ServiceDefinition:
        """The service ``name``, or the only one.

        Raises:
            ServedeckError: no such service, or several and no name.
        """
        if name is None:
            if len(self.services) != 1:
                raise ServedeckError(f"{len(self.services)} services; choose one", file=self.file,
                                     field="services",
                                     hint=f"pass --service (one of: {', '.join(self.services)})")
            return next(iter(self.services.values()))
        if name not in self.services:
            raise ServedeckError(f"no service {name!r}", file=self.file, field="services",
                                 hint=f"services: {', '.join(self.services)}")
        return self.services[name]

    def dump(self) -> dict[str, Any]:
        """Plain mapping: ``services`` first, then the other top-level keys."""
        return {"services": {n: s.dump() for n, s in self.services.items()}, **self.extra}

    def dumps(self) -> str:
        """YAML 1.2 text (ruamel, block style)."""
        return dump_yaml(self.dump())


def parse_document(source: str | dict[str, Any], file: str | None = None) -> Document:
    """Parse compose text (or an already loaded mapping) into a :class:`Document`.

    Raises:
        ServedeckError: not YAML or beyond :data:`servedeck.yamlio.LIMITS` (field = ``line N``),
            not a mapping, or no ``services``.
    """
    if isinstance(source, str):
        try:
            data = load_data(source)
        except YAMLError as exc:
            line, problem = syntax_error_at(exc)
            raise ServedeckError(f"compose file is not valid YAML: {problem}", line=line,
                                 file=file, field=f"line {line}" if line else None,
                                 hint="fix the YAML syntax") from None
    else:
        data = source
    data = to_plain(data)
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict) or not data["services"]:
        raise ServedeckError("no services in this compose file", file=file, field="services",
                             hint="a compose file needs a `services:` mapping")
    doc = Document(file=file)
    for name, svc in data["services"].items():
        try:
            doc.services[str(name)] = ServiceDefinition.parse(str(name), svc)
        except ServedeckError as exc:
            raise ServedeckError(exc.message, file=file, field=exc.field, hint=exc.hint) from None
    doc.extra = {k: v for k, v in data.items() if k != "services"}
    return doc


def load_document(path: str | Path) -> Document:
    """Read and parse a compose file.

    Raises:
        ServedeckError: missing file, or see :func:`parse_document`.
    """
    from servedeck.fsutil import read_bounded
    path = Path(path)
    try:
        text = read_bounded(path, LIMITS.max_bytes, what="compose")
    except FileNotFoundError:
        raise ServedeckError("file not found", file=str(path)) from None
    return parse_document(text, file=str(path))
