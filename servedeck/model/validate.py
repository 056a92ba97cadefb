"""Profile-file validation for CI and for a pre-commit hook in users' repositories.

Each file is validated against ``schema/profile.schema.json`` (jsonschema, draft 2020-12)
and then loaded through :class:`servedeck.model.profile.ProfileStore` (so ``extends`` chains,
digests and types are checked the same way ``invoke render`` checks them).
Used by ``servedeck validate`` (:mod:`servedeck.cli`), which the ``servedeck-profiles``
pre-commit hook runs (``.pre-commit-hooks.yaml``).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from servedeck.errors import ServedeckError
from servedeck.model.project import Project
from servedeck.yamlio import read_yaml_file


def validate_profile_files(paths: list[Path], project: Project) -> list[str]:
    """Validate profile files; return one message per problem (empty when all are valid).

    Messages read ``FILE: FIELD.PATH: message``.
    """
    from servedeck.model.profile import ProfileStore
    schema_path = project.schema_dir / "profile.schema.json"
    if not schema_path.exists():
        return [f"{schema_path}: missing; run `servedeck schema`"]
    validator = jsonschema.Draft202012Validator(json.loads(schema_path.read_text()))
    problems: list[str] = []
    for path in paths:
        try:
            data = read_yaml_file(path)
        except ServedeckError as exc:
            problems.append(exc.render())
            continue
        for err in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
            where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
            problems.append(f"{path}: {where}: {err.message}")
        try:
            ProfileStore(path.parent).load(path.stem)
        except ServedeckError as exc:
            problems.append(exc.render())
    return problems
