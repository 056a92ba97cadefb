"""``paths/*``: bind-mount sources tied to one machine or user, dangerous binds, SELinux
relabels and read-write weights (Compose Specification ``volumes``, short and long syntax, read by
the document model's grammar: :class:`servedeck.compose.document.Mount`), and every
path-valued server argument resolved against the container's mounts (``paths/argv-*``).

vLLM opens the paths it is given inside the container: a path written as the host has it
(``--lora-modules sql-lora=/srv/adapters/sql-lora`` beside ``/srv/adapters:/adapters``) does not
exist there (vllm-project/vllm#7286: "the path must be the path inside the container"; the
adapter fails with ``LoRAAdapterNotFoundError`` and every request for it gets 404). The
arguments judged, each as vLLM reads it (its effective setting, whatever the spelling): the
model argument, ``--tokenizer``, ``--lora-modules`` (``NAME=PATH`` and the JSON form
``{"name": ..., "path": ...}``), ``--chat-template`` (unless it is a template itself),
``--generation-config``, ``--hf-config-path``, ``--tool-parser-plugin``, ``--ssl-*``,
``--log-config-file``, ``--allowed-local-media-path``, ``--download-dir``, the speculative draft
model (``--speculative-config {"model": PATH}``), and the paths of JSON configs vLLM writes to
(``compilation_config.cache_dir``, ``kv_transfer_config.kv_connector_extra_config
.shared_storage_path``). A relative path is the image's working directory's.

- ``paths/argv-host-path`` (error): the path is under a bind mount's host source and under no
  mount target: the host's path, where the container sees it elsewhere.
- ``paths/argv-not-mounted`` (warning): no mount provides a path vLLM must open, and it is not
  where an image keeps its own files; or a path vLLM writes to is in the container's writable
  layer (lost when the container is re-created).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from servedeck.compose.document import Mount
from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import served_model


@dataclass(frozen=True)
class MountItem:
    """One ``volumes`` entry as the paths rules judge it, at its document path."""

    source: str | None
    target: str | None
    bind: bool
    read_only: bool
    selinux: str | None
    path: Path


def mounts(svc: Service) -> list[MountItem]:
    """Parse ``volumes`` (short ``SRC:DST[:MODE]`` and long syntax)."""
    out: list[MountItem] = []
    for i, v in enumerate(svc.data.get("volumes") or []):
        if not isinstance(v, (str, dict)):
            continue
        try:
            m = Mount.parse(v)  # the one volume grammar (short and long syntax)
        except ValueError:
            continue
        opts = set((m.mode or "").split(","))
        sel = ((m.extra.get("bind") or {}).get("selinux") if isinstance(m.extra.get("bind"), dict)
               else "Z" if "Z" in opts else "z" if "z" in opts else None)
        out.append(MountItem(m.source if isinstance(m.source, str) else None, m.target,
                         m.type == "bind" and m.source is not None, m.read_only, sel,
                         svc.path + ("volumes", i)))
    return out


def mount_at(path: str, ms: list[MountItem]) -> MountItem | None:
    """The mount that holds container path ``path`` (an absolute path): the one with the deepest
    target that is ``path`` or one of its parents; None when no mount does."""
    p = posixpath.normpath(path)
    best: MountItem | None = None
    for m in ms:
        t = posixpath.normpath(m.target) if m.target else None
        if t and (p == t or p.startswith(t.rstrip("/") + "/")) and (best is None or len(t) > len(best.target or "")):
            best = m
    return best


def host_mount_of(path: str, ms: list[MountItem]) -> tuple[MountItem, str] | None:
    """(the bind mount whose host source holds ``path``, where the container sees ``path``) for a
    path written as the host has it (``/srv/adapters/x`` of ``/srv/adapters:/adapters``:
    ``/adapters/x``); relative sources compare as written (``./adapters``). None when no bind
    source holds it."""
    p = posixpath.normpath(path)
    for m in ms:
        if not (m.bind and m.source and m.target):
            continue
        src = posixpath.normpath(m.source)
        if p == src or p.startswith(src.rstrip("/") + "/"):
            return m, posixpath.join(m.target, posixpath.relpath(p, src)) if p != src else m.target
    return None


def check_paths(ctx: Ctx, svc: Service) -> None:
    """``paths/*``: bind-mount sources that depend on the machine or are dangerous."""
    model = served_model(svc)
    for m in mounts(svc):
        src = m.source
        if m.bind and src:
            if re.match(r"^\$\{?HOME\b", src):
                ctx.warning("paths/home-variable", m.path,
                            f"bind source {src!r} uses $HOME, which Compose takes from whoever runs "
                            f"`docker compose` (another user or a CI job gets another path)",
                            "use an absolute path on the card host or a path relative to the compose file")
            elif src.startswith("~") or src.startswith(("/home/", "/Users/")):
                ctx.warning("paths/machine-specific", m.path,
                            f"bind source {src!r} is under a user's home directory; it exists only on "
                            f"the machine (and user) it was written on",
                            "use a host-wide path such as /srv/models, or a path relative to the compose file")
            elif src.rstrip("/") in ("", "/dev") or src == "/":
                ctx.error("paths/dangerous-bind", m.path,
                          f"bind-mounting {src!r} exposes the whole host {'root' if src == '/' else 'device tree'}"
                          f" to the container", "mount only what the server needs (e.g. /dev/dri via devices)")
            elif src.startswith("."):
                if ctx.expect.rendered:
                    msg = (f"relative bind source {src!r} resolves against the run's working directory on "
                           f"the card host")
                else:
                    msg = (f"relative bind source {src!r} resolves against the compose file's directory on "
                           f"the machine that runs `docker compose`")
                ctx.info("paths/relative", m.path, msg)
        if m.selinux:
            ctx.info("paths/selinux-relabel", m.path,
                     f":{m.selinux} relabels the host directory for SELinux "
                     f"({'private to this container' if m.selinux == 'Z' else 'shared'}); it is ignored on "
                     f"hosts without SELinux", "drop it unless the card host enforces SELinux")
        if model and m.target and not m.read_only and m.source and \
                (model == m.target or model.startswith(m.target.rstrip("/") + "/")):
            ctx.info("paths/weights-rw", m.path,
                     f"the weights mount ({m.target}) is read-write; the server never writes weights",
                     "append :ro to the volume")


# ----------------------------------------------------------------------------- path-valued arguments

#: argparse dest → (what vLLM opens there, it must exist: True; vLLM writes there: False)
PATH_ARGS: dict[str, tuple[str, bool]] = {
    "tokenizer": ("tokenizer", True),
    "chat_template": ("chat template", True),
    "generation_config": ("generation config", True),
    "hf_config_path": ("model config", True),
    "tool_parser_plugin": ("tool parser plugin", True),
    "ssl_keyfile": ("TLS key", True),
    "ssl_certfile": ("TLS certificate", True),
    "ssl_ca_certs": ("CA certificates", True),
    "log_config_file": ("logging config", True),
    "allowed_local_media_path": ("local media directory", True),
    "download_dir": ("download directory", False),
}

#: paths inside JSON config values: (dest, key path, what, must exist)
JSON_PATHS: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("speculative_config", ("model",), "draft model", True),
    ("speculative_config", ("tokenizer",), "draft tokenizer", True),
    ("compilation_config", ("cache_dir",), "compile cache", False),
    ("kv_transfer_config", ("kv_connector_extra_config", "shared_storage_path"), "KV transfer storage", False),
)

#: where images keep their own files: a path there that no mount provides is the image's
_IMAGE_ROOTS = ("/usr", "/opt", "/etc", "/app", "/workspace", "/vllm-workspace", "/srv/vllm")


def _is_path(value: str, *, repo_ids: bool) -> bool:
    """Whether an argument's text names a file system path (not a Hugging Face repo id, a
    template, a keyword)."""
    v = value.strip()
    if not v or "$" in v or "\n" in v or "{" in v or "://" in v:
        return False
    if v.startswith(("/", "./", "../", "~")):
        return True
    if repo_ids and v.count("/") == 1:
        return False  # org/name: a repo id
    return "/" in v or v.endswith((".jinja", ".j2", ".json", ".yaml", ".yml", ".pem", ".key", ".crt", ".py"))


def _lora_paths(value: Any) -> list[tuple[str, str]]:
    """(adapter name, path) of ``--lora-modules`` items: ``NAME=PATH`` or JSON
    ``{"name", "path", "base_model_name"}`` (``vllm/entrypoints/openai/cli_args.py``
    ``LoRAParserAction``)."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str) and item.strip().startswith("{"):
            try:
                item = json.loads(item)
            except ValueError:
                continue
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            out.append((str(item.get("name") or "?"), item["path"]))
        elif isinstance(item, str) and "=" in item:
            name, _, path = item.partition("=")
            out.append((name, path))
    return out


def _dig(value: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(k)
    return value


def argv_paths(svc: Service) -> list[tuple[str, str, str, bool, Path]]:
    """The paths the server's arguments name: (flag as written for the user, path text, what it
    is, it must exist, document path)."""
    out: list[tuple[str, str, str, bool, Path]] = []
    model = served_model(svc)
    if isinstance(model, str) and _is_path(model, repo_ids=True):
        at = svc.launch.model.index if svc.launch.model is not None else None
        path = svc.launch.tokens[at].path if at is not None and at < len(svc.launch.tokens) else svc.path + ("command",)
        out.append(("the model argument", model, "model", True, path))
    for dest, (what, must) in PATH_ARGS.items():
        e = svc.effective.get(dest)
        if e is None or not isinstance(e.value, str):
            continue
        if dest == "generation_config" and e.value in ("auto", "vllm"):
            continue
        if _is_path(e.value, repo_ids=dest == "tokenizer"):
            out.append((f"--{dest.replace('_', '-')}", e.value, what, must, e.path))
    e = svc.effective.get("lora_modules")
    if e is not None:
        for name, adapter in _lora_paths(e.value):
            if _is_path(adapter, repo_ids=True):
                out.append((f"--lora-modules {name}=", adapter, f"LoRA adapter {name!r}", True, e.path))
    for dest, keys, what, must in JSON_PATHS:
        e = svc.effective.get(dest)
        if e is None:
            continue
        value = _dig(e.value, keys)
        if isinstance(value, str) and _is_path(value, repo_ids=keys[-1] in ("model", "tokenizer")):
            out.append((f"--{dest.replace('_', '-')} {'.'.join(keys)}", value, what, must, e.path))
    return out


def check_argv_paths(ctx: Ctx, svc: Service) -> None:
    """``paths/argv-host-path`` and ``paths/argv-not-mounted``."""
    if svc.launcher is None:
        return
    ms = mounts(svc)
    workdir = str(svc.data.get("working_dir") or (svc.facts.workdir if svc.facts else None) or "/")
    for flag, text, what, must, path in argv_paths(svc):
        _judge(ctx, flag, text, what, must, path, ms, workdir)


def _judge(ctx: Ctx, flag: str, text: str, what: str, must: bool, path: Path, ms: list[MountItem],
           workdir: str) -> None:
    raw = text.strip()
    if raw.startswith("~"):
        return  # the shell's ~ is not expanded in an exec-form command: vLLM sees it literally
    inside = posixpath.normpath(raw if raw.startswith("/") else posixpath.join(workdir, raw))
    if mount_at(inside, ms) is not None:
        return
    hosted = host_mount_of(raw, ms)
    shown = f"{flag}{raw}" if flag.endswith("=") else f"{flag} {raw}"
    if hosted is not None:
        m, there = hosted
        ctx.error("paths/argv-host-path", path,
                  f"{shown}: the {what} is named by its path on the host; vLLM opens it inside the "
                  f"container, where {m.source} is mounted at {m.target}: {raw} does not exist there "
                  f"(as {inside})", f"write the container's path: {there}")
        return
    if must:
        if any(inside == r or inside.startswith(r + "/") for r in (*_IMAGE_ROOTS, posixpath.normpath(workdir))
               if r != "/"):
            return  # where images keep their own files (the image's working directory included)
        ctx.warning("paths/argv-not-mounted", path,
                    f"{shown}: no mount provides {inside}, the {what} vLLM opens; unless the image "
                    f"itself holds it, the server cannot open it",
                    "mount the host directory that holds it (volumes: [HOST:CONTAINER:ro]) and give "
                    "the container's path")
    else:
        ctx.warning("paths/argv-not-mounted", path,
                    f"{shown}: {inside}, where vLLM writes the {what}, is in the container's own "
                    f"writable layer: what it writes is lost when the container is re-created",
                    f"mount a host directory or a named volume at {inside}")
