"""Import an existing docker-compose file as a profile (the user's way in).

The compose file is read with ruamel.yaml (YAML 1.2, round-trip). The service's ``command``
is parsed back into typed settings according to the launcher contract (exl3xpu
``--set vllm.*`` / ``--set env.*`` values are YAML 1.1, as the launcher's PyYAML reads them).
Anything without a typed field is kept verbatim in ``engine.extra_args``; settings that
cannot be kept are an error naming the argv item.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML

from servedeck.model.catalog import Catalog
from servedeck.errors import ServedeckError
from servedeck.vllm.launcher import SET_FIELDS
from servedeck.model.profile import IMAGE_RE, Profile
from servedeck.yamlio import launcher_value, read_yaml_file

_FRONTEND_VALUE_FLAGS = {"--tool-call-parser": "tool_call_parser",
                         "--reasoning-parser": "reasoning_parser"}
_ENGINE_VALUE_FLAGS = {"--" + f.replace("_", "-"): f for f in SET_FIELDS if f != "enable_prefix_caching"}


def _load_compose(path: Path) -> dict[str, Any]:
    doc = read_yaml_file(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict) or not doc["services"]:
        raise ServedeckError("no services in this compose file", file=str(path), field="services")
    return doc


def _split_volume(spec: str) -> tuple[str, str, str | None]:
    parts = str(spec).split(":")
    if len(parts) < 2:
        raise ValueError(spec)
    return parts[0], parts[1], ":".join(parts[2:]) or None


def _take(argv: list[str], i: int, file: str, where: str) -> str:
    if i + 1 >= len(argv):
        raise ServedeckError(f"{argv[i]!r} has no value", file=file, field=where)
    return argv[i + 1]


def import_compose(path: str | Path, name: str, catalog: Catalog,
                   service: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Turn a compose file into a profile mapping.

    Args:
        path: the compose file.
        name: the new profile's name.
        catalog: to pick the launcher by image digest (else guessed from the command).
        service: the service to import when the file has several.

    Returns:
        ``(profile_mapping, notes)``: the mapping validates as a :class:`Profile`; notes
        say what was cleaned (e.g. whitespace stripped from an argv item).

    Raises:
        ServedeckError: missing file, no/ambiguous service, unpinned image, an argv item
            without a profile field — naming the file and the field path.
    """
    path = Path(path)
    file = str(path)
    doc = _load_compose(path)
    services = doc["services"]
    if service is None:
        if len(services) != 1:
            raise ServedeckError(f"{len(services)} services; choose one", file=file, field="services",
                                 hint=f"pass --service (one of: {', '.join(services)})")
        service = next(iter(services))
    if service not in services:
        raise ServedeckError(f"no service {service!r}", file=file, field="services",
                             hint=f"services: {', '.join(services)}")
    svc = services[service]
    base = f"services.{service}"
    notes: list[str] = []
    image = str(svc.get("image", ""))
    m = IMAGE_RE.match(image)
    if not m:
        raise ServedeckError(f"image {image!r} is not pinned by digest", file=file,
                             field=f"{base}.image",
                             hint="pin it (repo@sha256:<digest>) before importing; "
                                  "`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`")
    facts = catalog.lookup(m["digest"])
    command = svc.get("command")
    if isinstance(command, str):
        raise ServedeckError("command is a string (shell-split by Compose); write it as a list",
                             file=file, field=f"{base}.command", hint="one argv token per item")
    argv: list[str] = []
    for i, tok in enumerate(command or []):
        text = str(tok)
        if text != text.strip():
            notes.append(f"{base}.command[{i}]: stripped whitespace from {text!r}")
            text = text.strip()
        argv.append(text)
    kind = facts.launcher if facts else (
        "exl3xpu" if ("--set" in argv or "--model-path" in argv or "--gpu" in argv) else "vllm")

    engine: dict[str, Any] = {}
    launcher: dict[str, Any] = {"kind": kind}
    launcher_env: dict[str, Any] = {}
    served: list[str] = []
    port: int | None = None
    mount: str | None = None
    extra: list[str] = []
    speculative: dict[str, Any] | None | str = "unset"

    i = 0
    if kind == "exl3xpu":
        if not argv or argv[0].startswith("-"):
            raise ServedeckError("the exl3xpu launcher needs the model config as first item",
                                 file=file, field=f"{base}.command[0]")
        launcher["config"] = argv[0]
        i = 1
    elif argv and not argv[0].startswith("-"):
        mount = argv[0]
        i = 1
    while i < len(argv):
        tok = argv[i]
        where = f"{base}.command[{i}]"
        if tok == "--":
            extra += argv[i + 1:]
            break
        if tok in ("--gpu",) and kind == "exl3xpu":
            launcher["gpu"] = int(_take(argv, i, file, where)); i += 2; continue
        if tok in ("--model-path",) and kind == "exl3xpu" or tok == "--model":
            mount = _take(argv, i, file, where); i += 2; continue
        if tok == "--port":
            port = int(_take(argv, i, file, where)); i += 2; continue
        if tok == "--set" and kind == "exl3xpu":
            item = _take(argv, i, file, where)
            key, sep, raw = item.partition("=")
            if not sep:
                raise ServedeckError(f"--set item {item!r} has no '='", file=file,
                                     field=f"{base}.command[{i + 1}]")
            value = launcher_value(raw)
            parts = key.split(".")
            if parts[0] == "env" and len(parts) == 2:
                launcher_env[parts[1]] = None if value is None else raw if isinstance(value, str) else str(raw)
            elif parts[0] == "vllm" and len(parts) == 2 and parts[1] in SET_FIELDS:
                if parts[1] == "enable_prefix_caching" and value is None:
                    engine["enable_prefix_caching"] = False
                else:
                    engine[parts[1]] = value
            elif parts[:2] == ["vllm", "speculative_config"] and len(parts) == 2:
                speculative = value if isinstance(value, dict) or value is None else "bad"
                if speculative == "bad":
                    raise ServedeckError(f"speculative_config value {raw!r} is not a mapping",
                                         file=file, field=f"{base}.command[{i + 1}]")
            elif parts[:2] == ["vllm", "speculative_config"] and len(parts) == 3:
                if not isinstance(speculative, dict):
                    speculative = {}
                speculative[parts[2]] = value
            else:
                raise ServedeckError(f"no profile field for --set {key}", file=file,
                                     field=f"{base}.command[{i + 1}]",
                                     hint="supported: vllm." + ", vllm.".join(SET_FIELDS)
                                          + ", vllm.speculative_config[.KEY], env.NAME")
            i += 2
            continue
        if tok == "--served-model-name":
            j = i + 1
            while j < len(argv) and not argv[j].startswith("-"):
                served.append(argv[j]); j += 1
            i = j
            continue
        if tok == "--enable-auto-tool-choice":
            engine["enable_auto_tool_choice"] = True; i += 1; continue
        if tok == "--no-enable-prefix-caching":
            engine["enable_prefix_caching"] = False; i += 1; continue
        if tok == "--enable-prefix-caching" and kind == "vllm":
            engine["enable_prefix_caching"] = True; i += 1; continue
        if tok in _FRONTEND_VALUE_FLAGS:
            engine[_FRONTEND_VALUE_FLAGS[tok]] = _take(argv, i, file, where); i += 2; continue
        if kind == "vllm" and tok in _ENGINE_VALUE_FLAGS:
            engine[_ENGINE_VALUE_FLAGS[tok]] = launcher_value(_take(argv, i, file, where)); i += 2; continue
        if kind == "vllm" and tok == "--speculative-config":
            speculative = launcher_value(_take(argv, i, file, where)); i += 2; continue
        extra.append(tok)
        i += 1
    if speculative != "unset":
        if speculative is None:
            engine["speculative"] = None
        else:
            assert isinstance(speculative, dict)
            spec = dict(speculative)
            engine["speculative"] = {k: spec.pop(k) for k in ("method", "num_speculative_tokens")
                                     if k in spec}
            if spec:
                engine["speculative"]["options"] = spec
    if extra:
        engine["extra_args"] = extra

    volumes = [str(v) for v in svc.get("volumes") or []]
    model: dict[str, Any] = {"served_model_name": served or ["model"]}
    other_volumes = []
    for j, spec in enumerate(volumes):
        try:
            src, dst, opts = _split_volume(spec)
        except ValueError:
            raise ServedeckError(f"volume {spec!r} is not in short syntax source:target[:options]",
                                 file=file, field=f"{base}.volumes[{j}]") from None
        if mount is not None and dst == mount and "weights_dir" not in model:
            model.update(weights_dir=src, mount=dst)
            if opts:
                model["mount_options"] = opts
        else:
            other_volumes.append({"source": src, "target": dst, **({"options": opts} if opts else {})})
    if "weights_dir" not in model:
        raise ServedeckError(f"no volume is mounted at the model path {mount!r}", file=file,
                             field=f"{base}.volumes",
                             hint="the weights must be a bind mount at --model-path")
    if not served:
        notes.append("no --served-model-name: using 'model'")

    ports = [str(p) for p in svc.get("ports") or []]
    container: dict[str, Any] = {"service": service}
    if svc.get("container_name"):
        container["container_name"] = str(svc["container_name"])
    restart = svc.get("restart")
    if restart is not None:
        container["restart"] = "no" if restart is False else str(restart)
    if port is None and ports:
        port = int(ports[0].split(":")[-1].split("/")[0])
    if port is not None:
        container["port"] = port
    if ports:
        parts = ports[0].split("/")[0].split(":")
        host_port = int(parts[-2]) if len(parts) >= 2 else None
        if host_port is not None and host_port != port:
            container["host_port"] = host_port
        if len(parts) == 3:
            container["host_ip"] = parts[0]
    for key in ("devices", "group_add"):
        if svc.get(key):
            container[key] = [str(v) for v in svc[key]]
    env = svc.get("environment")
    if isinstance(env, list):
        env = dict(str(e).split("=", 1) for e in env)
    if env:
        container["environment"] = {str(k): "" if v is None else str(v) for k, v in env.items()}
    if other_volumes:
        container["volumes"] = other_volumes
    for key in ("shm_size", "ipc"):
        if svc.get(key) is not None:
            container[key] = str(svc[key])

    profile: dict[str, Any] = {"description": f"imported from {path.name}", "image": image,
                               "launcher": launcher, "model": model}
    if engine:
        profile["engine"] = engine
    if launcher_env:
        profile["launcher_env"] = launcher_env
    profile["container"] = container
    try:
        Profile.model_validate({"name": name, **profile})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ServedeckError(f"the imported profile is not valid: {err['msg']}", file=file,
                             field=".".join(str(p) for p in err["loc"])) from None
    return profile, notes


def dump_profile_yaml(profile: dict[str, Any], header: str | None = None) -> str:
    """Profile mapping → YAML 1.2 text (block style, key order kept, strings quoted when a
    YAML 1.1 reader would misread them)."""
    y = YAML(typ="rt")
    y.default_flow_style = False
    y.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    if header:
        buf.write("".join(f"# {line}\n" for line in header.splitlines()))
    y.dump(_quote_ambiguous(profile), buf)
    return buf.getvalue()


def _quote_ambiguous(value: Any) -> Any:
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    from servedeck.compose.yaml11 import plain_is_string
    if isinstance(value, dict):
        return {k: _quote_ambiguous(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_quote_ambiguous(v) for v in value]
    if isinstance(value, str) and not plain_is_string(value) and not value.startswith("/"):
        return DoubleQuotedScalarString(value)
    return value
