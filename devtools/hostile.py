"""Hostile input files of every kind servedeck reads, and the reader servedeck uses for each.

Shared by ``tests/unit/test_hostile_input.py`` (each file refused under a 1 s CPU and 100 MB
memory limit, in a forked child) and ``benchmarks/hostile_input.py`` (the figures). A case is
(kind, name, a function writing the file into a directory and returning its path); a kind's
reader is the call the CLI makes on such a file.

YAML cases: an alias bomb ("billion laughs": 9 levels of 9 aliases, 10^9 nodes from ~300
bytes), an alias to its own enclosing node, 50,000 and 1,000 levels of nesting, a flat list of
200,000 items (about 600 KB), a byte that is not UTF-8, and a 50 MB file (sparse). JSON cases
the same where JSON has them (no aliases).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
"""A 'billion laughs' YAML document: 9 aliases per level, 9 levels (10^9 leaves expanded)."""


def _yaml_cases(wrap: Callable[[str], str]) -> dict[str, Callable[[], bytes]]:
    """Hostile YAML bodies; ``wrap`` places a hostile value where the kind reads one."""
    return {
        "alias-bomb": lambda: BOMB.encode(),
        "recursive-alias": lambda: wrap("&loop [*loop]").encode(),
        "nesting-50000": lambda: wrap("[" * 50_000 + "]" * 50_000).encode(),
        "nesting-1000": lambda: wrap("[" * 1_000 + "]" * 1_000).encode(),
        "200000-items": lambda: wrap("[" + "1," * 200_000 + "1]").encode(),
        "not-utf8": lambda: wrap("'caf\udce9'").encode("utf-8", "surrogateescape"),
    }


def _json_cases() -> dict[str, Callable[[], bytes]]:
    return {
        "nesting-50000": lambda: ("[" * 50_000 + "]" * 50_000).encode(),
        "nesting-1000": lambda: ('{"a": ' * 1_000 + "1" + "}" * 1_000).encode(),
        "1500000-values": lambda: ("[" + "0," * 1_500_000 + "0]").encode(),
        "not-utf8": lambda: b'{"outcome": "caf\xe9"}',
    }


OVERSIZE_BYTES = 50 * 1024 * 1024


def _write(path: Path, body: bytes | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if body is None:  # oversized: a sparse file of OVERSIZE_BYTES (no disk, no time)
        with open(path, "wb") as fh:
            fh.truncate(OVERSIZE_BYTES)
    else:
        path.write_bytes(body)
    return path


# --------------------------------------------------------------------------- kinds


def _profile_path(d: Path) -> Path:
    return d / "profiles" / "hostile.yaml"


def _read_profile(path: Path) -> Any:
    from servedeck.model.profile import ProfileStore
    return ProfileStore(path.parent).load(path.stem)


def _read_inventory(path: Path) -> Any:
    from servedeck.model.inventory import load_inventory
    return load_inventory(path)


def _read_compose(path: Path) -> Any:
    """The check (``check --compose``) and the document model (``import``, ``ab``)."""
    from servedeck.compose.check import check_compose_file
    from servedeck.compose.document import load_document
    from servedeck.errors import ServedeckError
    _, findings = check_compose_file(path)
    errors = [f for f in findings if f.severity.value == "error"]
    if not errors:
        return "accepted by the check"
    try:
        load_document(path)
    except ServedeckError:
        pass
    else:
        return "accepted by the document model"
    raise ServedeckError(errors[0].message, file=str(path), field=f"line {errors[0].line}")


def _read_catalog(path: Path) -> Any:
    from servedeck.model.catalog import Catalog
    return Catalog(path)


def _read_run_meta(path: Path) -> Any:
    from servedeck.runs import store
    return store.read_meta(path.parent)


def _read_run_json(path: Path) -> Any:
    from servedeck.runs import store
    return store.read(path.parent, store.FACTS)


def _read_samples(path: Path) -> Any:
    from servedeck.runs import store
    return store.read(path.parent, store.BENCH_SAMPLES)


def _read_external(path: Path) -> Any:
    from servedeck.bench.external import import_file
    return import_file(path)


def _read_fleet_result(path: Path) -> Any:
    from servedeck.jsonio import read_json_file
    return read_json_file(path)


#: kind -> (file path in a directory, reader, YAML or JSON cases)
KINDS: dict[str, tuple[Callable[[Path], Path], Callable[[Path], Any], dict[str, Callable[[], bytes]]]] = {
    "profile": (_profile_path, _read_profile,
                _yaml_cases(lambda v: f"extends: base\ncontainer:\n  compose_extra:\n    x-hostile: {v}\n")),
    "inventory": (lambda d: d / "hosts.yaml", _read_inventory,
                  _yaml_cases(lambda v: f"hosts:\n  b70:\n    workdir: /srv/x\n    tags: {v}\n")),
    "compose": (lambda d: d / "docker-compose.yml", _read_compose,
                _yaml_cases(lambda v: f"services:\n  vllm:\n    image: x\n    labels: {v}\n")),
    "catalog": (lambda d: d / "images.yaml", _read_catalog,
                _yaml_cases(lambda v: f"images:\n  sha256:{'0' * 64}:\n    note: {v}\n")),
    "run.json": (lambda d: d / "runs" / "0001-x-b70" / "run.json", _read_run_meta, _json_cases()),
    "facts.json": (lambda d: d / "runs" / "0001-x-b70" / "facts.json", _read_run_json, _json_cases()),
    "bench.jsonl": (lambda d: d / "runs" / "0001-x-b70" / "bench.jsonl", _read_samples, _json_cases()),
    "external-result": (lambda d: d / "vllm-bench.json", _read_external, _json_cases()),
    "fleet-result": (lambda d: d / "results" / "e1.json", _read_fleet_result, _json_cases()),
}


def cases() -> list[tuple[str, str]]:
    """Every (kind, case name), the oversized file of each kind included."""
    return [(kind, name) for kind, (_, _, bodies) in KINDS.items() for name in [*bodies, "50MB"]]


def write_case(directory: Path, kind: str, name: str) -> Path:
    """Write the hostile file ``name`` of ``kind`` under ``directory``; return its path."""
    where, _, bodies = KINDS[kind]
    return _write(where(Path(directory)), None if name == "50MB" else bodies[name]())


def read_case(kind: str, path: Path) -> Any:
    """Read ``path`` as servedeck reads a file of ``kind`` (raises what servedeck raises)."""
    return KINDS[kind][1](path)


def setup_project(directory: Path, repo_root: Path) -> None:
    """Give ``directory`` what a profile needs besides itself: the repository's ``base`` profile."""
    (directory / "profiles").mkdir(parents=True, exist_ok=True)
    base = repo_root / "profiles" / "base.yaml"
    (directory / "profiles" / "base.yaml").write_bytes(base.read_bytes())
    os.makedirs(directory / "runs" / "0001-x-b70", exist_ok=True)
