"""``env/*``: the service environment as the container receives it, and as vLLM reads it.

Compose Specification ``environment``: in the list form each item is one ``KEY=VALUE`` string
taken verbatim (no shell removes quotes; docker/compose#2854); in the mapping form YAML has
already removed them. vLLM reads only the ``VLLM_*`` variables listed in
``vllm/envs.py`` ``environment_variables`` of its release (others are ignored; recent releases
log "Unknown vLLM environment variable detected").
"""

from __future__ import annotations

import difflib

from servedeck.compose.rules._facts import judge
from servedeck.compose.rules._context import Ctx, Service
from servedeck.grammar import ENV_NAME_RE

_QUOTES = ("'", '"')
#: quote pairs that reach the container as characters when they wrap a value: the ASCII quotes,
#: the same behind a backslash (no shell removes the escape), and typographic quotes (not quotes
#: to YAML or Compose at all; copied from web pages and word processors)
_PAIRS = (('\\"', '\\"'), ("\\'", "\\'"), ('"', '"'), ("'", "'"), ("\u201c", "\u201d"),
          ("\u2018", "\u2019"), ("\u201e", "\u201c"), ("\u00ab", "\u00bb"))

#: vLLM variables read by launchers or images rather than by vllm/envs.py; never reported.
_NOT_ENVS_PY = {"VLLM_API_KEY"}


def _check_quotes(ctx: Ctx, e) -> None:
    """Quote characters at the ends of the value the container gets: both ends quoted alike
    (``env/list-literal-quotes`` in the list form, where they were meant to be removed;
    ``env/literal-quotes`` in the mapping form, where YAML removed one pair and left another;
    spaces around them included), an unpaired quote at one end (``env/stray-quote``, a warning:
    ``rock 'n' roll'`` may be meant), a quote in the name (``env/quoted-name``). Balanced
    quotes inside the value are fine."""
    if any(q in e.key for q in _QUOTES):
        ctx.error("env/quoted-name", e.path,
                  f"environment name {e.key}: the quote characters are part of the variable's name, "
                  f"so nothing reads {e.key.strip(''.join(_QUOTES))}",
                  f"write {e.key.strip(''.join(_QUOTES))}=VALUE")
    v = (e.value or "").strip()  # quotes behind spaces reach the container all the same
    pair = next((p for p in _PAIRS if len(v) >= len(p[0]) + len(p[1]) and v.startswith(p[0])
                 and v.endswith(p[1])), None)
    if pair is not None and pair[0] not in _QUOTES:
        inner = v[len(pair[0]):len(v) - len(pair[1])]
        kind = "backslash-escaped quotes" if pair[0].startswith("\\") else "typographic quotes"
        rule = "env/list-literal-quotes" if e.list_form else "env/literal-quotes"
        ctx.error(rule, e.path,
                  f"environment {e.key}: the value the container gets is {v}, {kind} included "
                  f"(neither YAML nor Compose removes them, and no shell runs); a client sending "
                  f"{inner} does not match it", f"write {e.key}: {inner}")
        return
    if not v or (v[0] not in _QUOTES and v[-1] not in _QUOTES):
        return
    if len(v) >= 2 and v[0] in _QUOTES and v[-1] == v[0]:
        if e.list_form:
            ctx.error("env/list-literal-quotes", e.path,
                      f"list-form environment item {e.key}={v}: the quote characters are part of the "
                      f"value ({e.key} becomes {v}, quotes included; no shell removes them in this form)",
                      f"write - {e.key}={v[1:-1]}, or use the mapping form {e.key}: {v}")
        else:
            ctx.error("env/literal-quotes", e.path,
                      f"environment {e.key}: the value the container gets is {v}, quote characters "
                      f"included (YAML removed only the outer pair of quotes); a client sending "
                      f"{v[1:-1]} does not match it",
                      f"write {e.key}: {v[1:-1]}")
        return
    q = v[0] if v[0] in _QUOTES else v[-1]
    if v.count(q) % 2 == 0:
        return  # balanced quotes inside the value (name = 'x'): part of what it means
    end = "starts" if v[0] in _QUOTES else "ends"
    ctx.warning("env/stray-quote", e.path,
                f"environment {e.key}: the value {end} with a quote character that the container gets "
                f"as part of it ({e.key} becomes {v}; no shell removes quotes in a compose file)",
                f"remove the quote: {e.key}={v.strip(''.join(_QUOTES))}")


def check_environment(ctx: Ctx, svc: Service) -> None:
    """``env/list-literal-quotes``, ``env/literal-quotes``, ``env/stray-quote``, ``env/quoted-name``,
    ``env/name`` (a name that is not a variable name, :data:`servedeck.grammar.ENV_NAME_RE`) and
    ``env/not-read-by-version``; ``env/file-missing`` for a required ``env_file`` that is not
    there (when the caller read the files)."""
    from servedeck.compose.document import env_file_paths
    for where, name, required in env_file_paths(svc.data.get("env_file")):
        if required and name in ctx.expect.env_files and ctx.expect.env_files[name] is None:
            ctx.error("env/file-missing", svc.path + where,
                      f"env_file {name!r} is not there (relative to the compose file's directory): "
                      f"Compose refuses to run the file", f"create {name}, or mark it required: false")
    items = svc.env_items
    for e in items:
        _check_quotes(ctx, e)
        if not any(q in e.key for q in _QUOTES) and not ENV_NAME_RE.match(e.key):
            ctx.error("env/name", e.path,
                      f"environment name {e.key!r} is not a variable name (letters, digits, '_', '.', "
                      f"'-', not starting with a digit): the container gets a variable nothing reads by "
                      f"that name", "check where the name ends: a line break or ': ' inside it means "
                                   "text meant as more YAML became part of the name", key=not e.list_form)
    if svc.launcher is None:
        return
    j = judge(ctx, svc, "env_vars")
    if j is None:
        return
    known = set(j.facts.env_vars or [])
    version = svc.facts.vllm_version if svc.facts else j.facts.vllm_version
    v1_only = (svc.release or (0, 0, 0)) >= (0, 11, 0)
    for e in items:
        if not e.key.startswith("VLLM_") or e.key in known or e.key in _NOT_ENVS_PY:
            continue
        if j.maybe_added(lambda f: e.key in (f.env_vars or [])):  # noqa: B023 - called at once
            continue  # read by the next newer release: may have been added in between
        extra = ""
        if e.key == "VLLM_USE_V1" and v1_only:
            extra = (f"; vLLM {version} runs only the V1 engine (V0 was removed in 0.11), so "
                     f"VLLM_USE_V1={e.value} selects nothing")
        close = difflib.get_close_matches(e.key, sorted(known), n=2, cutoff=0.85)
        hint = f"did you mean {' or '.join(close)}?" if close else f"remove {e.key}"
        ctx.warning("env/not-read-by-version", e.path,
                    f"{e.key} is not read by {j.basis}: the setting does nothing{extra}", hint)
