"""``interpolation/*``: Compose's ``$VAR`` / ``${VAR...}`` / ``$$`` syntax (compose-spec
``interpolation.md``; compose-go ``template`` rejects any other ``$``), and profile values that
look like a variable but reach the server as written.
"""

from __future__ import annotations

import re

from servedeck.compose.document import interpolate, interpolation_refs, literal_values
from servedeck.compose.rules._context import Ctx
from servedeck.compose.rules._doc import Path, field_context


def _literal_variable(ctx: Ctx, path: Path, value: str, names: list[str]) -> None:
    """A profile's command or environment value holding ``${NAME}`` / ``$NAME`` (``names``, the
    variables it names): the renderer wrote its ``$`` as ``$$``, so neither Compose nor vLLM (no
    shell runs the argv) substitutes it, and the server gets those characters."""
    if field_context(path)[0] in ("command", "entrypoint", "environment"):
        shown = ", ".join(f"${n}" for n in dict.fromkeys(names))
        ctx.warning("interpolation/literal", path,
                    f"{value!r} reaches the server as written: a profile value is literal "
                    f"(servedeck writes $ as $$), so {shown} is not substituted by Compose",
                    "write the value itself; to keep a secret out of the profile, put it in a file "
                    "on the host and name it in container.compose_extra: {env_file: [FILE]} "
                    "(relative to the host's working directory)")


def check_interpolation(ctx: Ctx) -> None:
    """``interpolation/invalid`` (error), ``interpolation/unintended`` (warning) and, in a file
    servedeck rendered, ``interpolation/literal`` (warning: a profile value that looks like a
    Compose variable reaches the server as it is written)."""
    seen: set[tuple[int, str]] = set()
    for path, sc in ctx.doc.scalars.items():
        if sc.tag != "str" or "$" not in sc.raw or "<<" in path:
            continue
        refs, bad = interpolation_refs(sc.raw)
        if (sc.line, sc.raw) in seen:
            continue
        seen.add((sc.line, sc.raw))
        if ctx.expect.rendered and not refs and bad is None and "$$" in sc.raw:
            value = literal_values(sc.raw)
            names, _ = interpolation_refs(value)
            if names:
                _literal_variable(ctx, path, value, names)
            continue
        if bad is not None:
            ctx.error("interpolation/invalid", path,
                      f"{bad!r} is not a valid Compose interpolation; `docker compose` refuses the file",
                      "write a literal $ as $$, or use ${NAME}")
            continue
        if not refs:
            continue
        field_name, _ = field_context(path)
        argv_like = field_name in ("command", "entrypoint", "healthcheck")
        json_like = sc.raw.lstrip().startswith(("{", "["))
        # a bare $NAME inside an environment value (a key or password containing "$") is cut
        # out by Compose; ${NAME} or a value that is only $NAME passes a variable on purpose
        env_embedded = field_name == "environment" and re.search(r"\S\$[A-Za-z_]", sc.raw.split("=", 1)[-1]) \
            is not None and "${" not in sc.raw
        # every reference with a default (${VAR:-x}) or set by the file's .env: substitution
        # by Compose is what the author meant
        meant = interpolate(sc.raw, ctx.expect.variables) is not None
        if (argv_like or json_like or env_embedded) and not meant:
            shown = ", ".join(f"${r}" for r in dict.fromkeys(refs))
            ctx.warning("interpolation/unintended", path,
                        f"Compose substitutes {shown} from the environment of whoever runs "
                        f"`docker compose` (empty when unset), before the container sees it",
                        "write $$ for a literal $ (a shell in the container then expands it)")
