"""JSON Schemas of the profile and inventory files, generated from the pydantic models.

``schema/profile.schema.json`` validates one ``profiles/*.yaml`` file. A root profile (no
``extends``) must be complete; a variant (with ``extends``) is a partial patch: no field
is required and any field may be ``null`` (null deletes the key during the merge). The
schemas are JSON Schema draft 2020-12 as emitted by pydantic v2.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from servedeck.fsutil import atomic_write
from servedeck.model.inventory import Inventory
from servedeck.model.profile import Profile

SCHEMA_FILES = ("profile.schema.json", "hosts.schema.json")


def _patch(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop ``required`` everywhere and allow ``null`` for every property."""
    if isinstance(schema, dict):
        out = {k: _patch(v) for k, v in schema.items() if k != "required"}
        if "properties" in out:
            out["properties"] = {k: {"anyOf": [v, {"type": "null"}]}
                                 for k, v in out["properties"].items()}
        return out
    if isinstance(schema, list):
        return [_patch(v) for v in schema]
    return schema


def profile_schema() -> dict[str, Any]:
    """The profile-file schema (dict)."""
    full = Profile.model_json_schema()
    full["required"] = [r for r in full.get("required", []) if r != "name"]
    defs = full.pop("$defs", {})
    patch_defs = {f"Patch{k}": _patch(v) for k, v in defs.items()}
    text = json.dumps(_patch({k: v for k, v in full.items()}))
    for name in defs:
        text = text.replace(f'"#/$defs/{name}"', f'"#/$defs/Patch{name}"')
    patch = json.loads(text)
    patch_defs = json.loads(json.dumps(patch_defs).replace('"#/$defs/', '"#/$defs/Patch'))
    # the replacement above doubled prefixes for already-patched refs: normalise
    patch_defs = json.loads(json.dumps(patch_defs).replace("PatchPatch", "Patch"))
    full_root = copy.deepcopy(full)
    for k in ("title", "description"):
        full_root.pop(k, None)
        patch.pop(k, None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://servedeck.dev/schema/profile.schema.json",
        "title": "servedeck profile file",
        "description": ("A profile without `extends` must be complete; a variant (`extends: NAME`) "
                        "is a partial patch over its parent (null deletes a key)."),
        "$defs": {**defs, **patch_defs, "FullProfile": full_root, "PatchProfile": patch},
        "if": {"required": ["extends"], "properties": {"extends": {"type": "string"}}},
        "then": {"$ref": "#/$defs/PatchProfile"},
        "else": {"$ref": "#/$defs/FullProfile"},
    }


def hosts_schema() -> dict[str, Any]:
    """The inventory-file schema (dict)."""
    schema = Inventory.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://servedeck.dev/schema/hosts.schema.json"
    return schema


def rendered_schemas() -> dict[str, str]:
    """File name → JSON text (2-space indent, trailing newline) for every schema."""
    return {"profile.schema.json": json.dumps(profile_schema(), indent=2) + "\n",
            "hosts.schema.json": json.dumps(hosts_schema(), indent=2) + "\n"}


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into ``directory`` atomically; return the paths written."""
    return [atomic_write(directory / name, text) for name, text in rendered_schemas().items()]


def stale_schemas(directory: Path) -> list[str]:
    """Names of schema files in ``directory`` that are missing or differ from the models."""
    out = []
    for name, text in rendered_schemas().items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            out.append(name)
    return out
