"""Profile-file validation for CI and for a pre-commit hook in users' repositories.

Each file is validated against ``schema/profile.schema.json`` (jsonschema, draft 2020-12)
and then loaded through :class:`servedeck.model.profile.ProfileStore` (so ``extends`` chains,
digests and types are checked the same way ``invoke render`` checks them).
Hook use: ``python -m servedeck.model.validate profiles/*.yaml`` (see ``.pre-commit-hooks.yaml``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from servedeck.errors import ServedeckError
from servedeck.model.project import Project


def validate_profile_files(paths: list[Path], project: Project) -> list[str]:
    """Validate profile files; return one message per problem (empty when all are valid).

    Messages read ``FILE: FIELD.PATH: message``.
    """
    from servedeck.model.profile import ProfileStore
    schema_path = project.schema_dir / "profile.schema.json"
    if not schema_path.exists():
        return [f"{schema_path}: missing; run `invoke schema`"]
    validator = jsonschema.Draft202012Validator(json.loads(schema_path.read_text()))
    problems: list[str] = []
    for path in paths:
        try:
            data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
        except (OSError, YAMLError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        for err in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
            where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
            problems.append(f"{path}: {where}: {err.message}")
        try:
            ProfileStore(path.parent).load(path.stem)
        except ServedeckError as exc:
            problems.append(exc.render())
    return problems


def main(argv: list[str] | None = None) -> int:
    """Entry point of the pre-commit hook: validate the given files, print problems, 0/1."""
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args if a.endswith((".yaml", ".yml"))]
    problems = validate_profile_files(paths, Project.find(paths[0].parent if paths else None))
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
