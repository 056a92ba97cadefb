"""Where in the profile to edit: a finding of a rendered profile's compose file mapped back to
the profile file and line of the value that produced the rendered line.

A check of a profile judges its rendered compose text, so its findings carry that text's line
(``profile:speed:34``) and document path (``services.exl3xpu.command[10]``). The value behind a
rendered item is found from what the render already knows:

* a command token: the effective engine setting it gives (:attr:`Service.effective`, each with
  the document path of its item), whose vLLM dest name is the profile's ``engine.<dest>``
  (``speculative_config`` is ``engine.speculative``), else any profile key of that name;
* any other item of the service (``restart``, ``volumes``, ``image``, ``environment.NAME``):
  the profile key of the same name (``container.restart``, ``container.volumes``, ``image``,
  ``launcher_env.NAME`` / ``container.environment.NAME``).

The file is the profile of the ``extends`` chain that last set the key
(:attr:`LoadedProfile.origin`); the line is that key's line in that file (ruamel.yaml's
positions). A finding with no such key (a value the template writes by itself) keeps only
its rendered position.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from servedeck.findings import Finding

_DEST_FIELD = {"speculative_config": ("engine", "speculative")}


def _doc_path(text: str) -> tuple[str | int, ...]:
    """``services.x.command[7]`` → ``("services", "x", "command", 7)``."""
    out: list[str | int] = []
    for part in text.split("."):
        name, *indices = part.split("[")
        if name:
            out.append(name)
        out += [int(i.rstrip("]")) for i in indices if i.rstrip("]").isdigit()]
    return tuple(out)


def _keys(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append(prefix + (str(k),))
            out += _keys(v, prefix + (str(k),))
    return out


def _profile_keys(doc_path: tuple[str | int, ...], service: Any, merged: dict[str, Any]) -> list[tuple[str, ...]]:
    """Profile key paths that may have produced the item at ``doc_path``, best first."""
    keys = _keys(merged)
    names: list[str] = []
    if service is not None and len(doc_path) >= 4 and doc_path[2] in ("command", "entrypoint"):
        # a setting's path is its value token: the finding is at it, or at the flag just before it
        for near in (0, 1):
            for dest, setting in service.effective.items():
                p = tuple(setting.path)
                if p[:-1] == doc_path[:-1] and isinstance(p[-1], int) and isinstance(doc_path[-1], int) \
                        and p[-1] - doc_path[-1] == near:
                    if dest in _DEST_FIELD:
                        return [_DEST_FIELD[dest]]
                    names.append(dest)
            if names:
                break
        return ([("engine", n) for n in names if ("engine", n) in keys]
                + [k for n in names for k in keys if k[-1] == n and k[:1] != ("engine",)])
    if len(doc_path) >= 3:
        item = str(doc_path[2])
        if item in ("environment",) and len(doc_path) >= 4:
            var = str(doc_path[3])
            return [k for k in keys if k[-1] == var and k[0] in ("launcher_env", "container")]
        if item == "image":
            return [("image",)]
        return [k for k in keys if k[-1] == item and k[0] in ("container", "host", "model", "engine")]
    return []


def _nth(items: Any, i: int) -> Any:
    return items[i] if isinstance(items, list) and 0 <= i < len(items) else None


def _source(item: Any) -> Any:
    """A volume's (or port's) first part: ``source`` of the long syntax, else the text before
    the first ``:``."""
    if isinstance(item, dict):
        return item.get("source", item.get("published"))
    return str(item).split(":", 1)[0] if item is not None else None


def _same_item(rendered: Any, mine: Any) -> bool:
    return rendered is not None and (rendered == mine or _source(rendered) == _source(mine) is not None)


def _value(data: Any, key: tuple[str, ...]) -> Any:
    for part in key:
        data = data.get(part) if isinstance(data, dict) else None
    return data


@functools.lru_cache(maxsize=64)
def _key_lines(path: str, mtime_ns: int) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key of the YAML file at ``path`` ({} when it does not parse)."""
    try:
        doc = YAML(typ="rt").load(Path(path).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - a file that does not parse has no positions to give
        return {}
    out: dict[tuple[str, ...], int] = {}

    def walk(node: Any, prefix: tuple[str, ...]) -> None:
        lc = getattr(node, "lc", None)  # ruamel's line/column record of a round-trip node
        if lc is not None and isinstance(node, dict):
            for k, v in node.items():
                out[prefix + (str(k),)] = lc.key(k)[0] + 1
                walk(v, prefix + (str(k),))
        elif lc is not None and isinstance(node, list):
            for i, v in enumerate(node):
                out[prefix + (f"[{i}]",)] = lc.item(i)[0] + 1
                walk(v, prefix + (f"[{i}]",))
    walk(doc, ())
    return out


def key_line(path: Path, key: tuple[str, ...]) -> int | None:
    """1-based line of ``key`` (a key path; ``"[i]"`` for the i-th item of a sequence) in the
    YAML file ``path``, or None."""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    return _key_lines(str(path), mtime).get(key)


def profile_positions(findings: list[Finding], loaded: Any, rendered: Any) -> list[Finding]:
    """``findings`` of ``rendered`` (a :class:`servedeck.compose.render.Rendered` of the
    :class:`servedeck.model.profile.LoadedProfile` ``loaded``) with ``profile_file``,
    ``profile_line`` and ``profile_field`` set where a profile key produced the rendered item
    (an item of the profile's own service, or of the file's top level; never one of another
    service a project's template writes); the rendered ``file``/``line``/``path`` stay as they
    were. New Finding objects; the input is not changed."""
    out = []
    for f in findings:
        if not f.path or f.profile_file is not None:
            out.append(f)
            continue
        doc_path = _doc_path(f.path)
        if doc_path[:1] == ("services",) and len(doc_path) >= 2 and doc_path[1] != rendered.service.name:
            out.append(f)  # another service the template writes: no profile key made it
            continue
        service = rendered.service if len(doc_path) >= 2 else None
        found = None
        for key in _profile_keys(doc_path, service, loaded.merged):
            file = loaded.origin.get(key)
            line = key_line(file, key) if file is not None else None
            if line is None:
                continue
            field = ".".join(key)
            items = _value(loaded.merged, key)
            if len(doc_path) >= 4 and isinstance(doc_path[3], int) and isinstance(items, list) and service:
                # a list item: the profile's item with the rendered item's value (the template
                # may add items of its own, so the index alone does not tell)
                mine = _nth(service.data.get(str(doc_path[2])), doc_path[3])
                j = next((j for j, item in enumerate(items) if _same_item(mine, item)), None)
                if j is None:
                    continue
                line = key_line(file, key + (f"[{j}]",)) or line
                field = f"{field}[{j}]"
            found = (str(file), line, field)
            break
        if found is None:
            out.append(f)
            continue
        out.append(f.model_copy(update={"profile_file": found[0], "profile_line": found[1],
                                        "profile_field": found[2]}))
    return out


__all__ = ["key_line", "profile_positions"]
