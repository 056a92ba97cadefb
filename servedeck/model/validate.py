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
from jsonschema.exceptions import best_match

from servedeck.errors import ServedeckError
from servedeck.model.project import Project
from servedeck.yamlio import read_yaml_file


def validate_profile_files(paths: list[Path], project: Project) -> list[str]:
    """Validate profile files; return one message per problem (empty when all are valid).

    Messages read ``FILE[:LINE]: FIELD.PATH: message`` (plus an indented hint line). Each
    problem is reported once: the loader's (with its "did you mean") wins over the schema's
    for the same field, and a ``oneOf``/``anyOf`` failure is reported as the branch error that
    matters (:func:`jsonschema.exceptions.best_match`), not as "is not valid under any of the
    given schemas".
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
        try:
            ProfileStore(path.parent).load(path.stem)
            loaded: list[ServedeckError] = []
        except ServedeckError as exc:
            loaded = exc.problems or [exc]
        fields = {p.field for p in loaded if p.file == str(path)}
        for err in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
            if err.context:  # a failed oneOf/anyOf: the branch error that matters
                err = best_match(err.context)
            where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
            if not any(f == where or (f or "").startswith(where + ".") or where.startswith(f"{f}.")
                       for f in fields):
                fields.add(where)
                problems.append(f"{path}: {where}: {err.message}")
        own = [p for p in loaded if p.file == str(path)]
        problems += [p.render() for p in own]
        if loaded and not own:  # the parent's problems are reported with the parent's file
            problems.append(f"{path}: extends: a profile it extends does not load ({loaded[0].file})")
    return problems
