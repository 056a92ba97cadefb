"""Verify a docker-compose file that serves vLLM: ``invoke check``.

Works on any compose text (hand-written or rendered by servedeck). The text is read with
ruamel.yaml (YAML 1.2, round-trip composer) so every finding carries a 1-based line and a
document path such as ``services.exl3xpu.command[7]``. Rule ids are ``family/name``; each family
lives in ``servedeck/compose/rules/<family>.py`` (``yaml/*`` in the document reader ``_doc.py``,
``json/*`` beside ``flags/*``):

=================  ===============================================================
``yaml/*``         syntax errors, duplicate keys, empty file
``schema/*``       Compose Specification JSON Schema (``compose/compose-spec.json``)
``image/*``        digest pinning, malformed digests, catalog knowledge
``yaml11/*``       plain scalars YAML 1.1 readers take differently (``2122:22``, ``yes``, ``0123``)
``argv/*``         command/entrypoint items: joined flag+value, whitespace, leaked quotes, JSON;
                   the model as the image's vLLM reads it (twice, refused --model, not first,
                   a second positional, none: ``servedeck.vllm.argv.model_argument``)
``launcher/*``     a command repeating the image's start; the contract of a launcher with a
                   config of its own (exl3xpu ``scripts/serve.py``: ``--set``, passthrough,
                   env merge), as the service's launcher reads the command
``vllm/*``         vLLM constraints and names for the image's vLLM version
``interpolation/*`` Compose ``$VAR`` substitution
``ports/*``        published port vs the server's ``--port``; host ports two containers bind
``gpu/*``          device access (xpu: /dev/dri + render gid, /dev/dri/by-path for oneCCL across
                   several GPUs; cpu: /dev/shm; NVIDIA requests: deploy.resources / gpus / CDI),
                   GPUs vs parallel sizes, shared GPUs, /dev/shm
``devices/*``      ``devices`` entries Compose refuses (long syntax without a target)
``server/*``       server vs container: loopback host, healthcheck port/binary/key/start_period
``env/*``          quotes that reach the container, VLLM_* variables the release does not read,
                   a missing env_file
``flags/*``        flags judged by the release's own parser facts (unknown, abbreviated, hidden,
                   deprecated, values)
``json/*``         values of JSON config flags against the release's config model (its schema
                   and the verdicts of vLLM's own validators), with the field path
``features/*``     settings that need each other (thinking w/o reasoning parser, parser family, context fit)
``entrypoint/*``   entrypoint replacing an image wrapper; a positional model the api_server
                   module parses and never uses
``restart/*``      restart policies that loop on a failed start
``paths/*``        bind mounts tied to one machine, dangerous binds, read-write weights; every
                   path-valued server argument against the container's mounts (``argv-*``)
``cache/*``        where huggingface_hub looks for a repo id's files (HF_HUB_CACHE, HF_HOME,
                   XDG_CACHE_HOME, the user's HOME) against the mounts, offline or not
``deps/*``         ``depends_on`` across services (healthy without a healthcheck, unknown
                   service, waiting for a server to exit, cycles); ``extends`` of a service the
                   file does not have, or in a cycle
``container/*``    one ``container_name`` twice, or on a service with replicas
``resources/*``    container limits vLLM needs (memory for its own host buffers and processes,
                   swap and reservation vs limit, pids, open files)
=================  ===============================================================

The service rules judge each service as it will run (:class:`servedeck.compose.service.Service`:
its launcher, the command as that launcher reads it, the effective settings with their
provenance), read as Compose reads it: its ``extends`` merged in, and its values interpolated with
the file's own defaults and, when the caller read them, its ``.env`` and ``env_file`` files
(``CheckExpectations``); what only the shell of whoever runs Compose can give is judged as
written. A file servedeck rendered is judged on the renderer's own reading of it
(:func:`check_rendered`): parsed once, each service's command read once.

Severity: ``error`` for what will break or silently change meaning, ``warning`` for likely
mistakes, ``info`` for facts worth knowing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servedeck.model.catalog import Catalog
from servedeck.errors import ServedeckError
from servedeck.findings import Finding, Severity
from servedeck.compose.rules import (argv, cache, container, deps, devices, entrypoint, env, features, flags, gpu,
                                     image, interpolation, keys, launcher, paths, ports, resources, restart, schema,
                                     server, vllm, yaml11)
from servedeck.compose.rules._doc import DocError, parse
from servedeck.compose.rules._context import CheckExpectations, Ctx, services
from servedeck.compose.service import Service

if TYPE_CHECKING:
    from servedeck.compose.render import Rendered

__all__ = ["CheckExpectations", "check_compose_file", "check_compose_text", "check_rendered", "format_findings",
           "findings_to_json"]

_RANK = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}

_SERVICE_RULES = (image.check_image, image.check_placeholder_digest, argv.check_argv, launcher.check_launcher,
                  vllm.check_vllm, ports.check_ports, gpu.check_gpu, restart.check_restart, paths.check_paths,
                  devices.check_devices, gpu.check_gpu_requests, server.check_server_container, env.check_environment,
                  flags.check_flags, flags.check_json_values, features.check_features, entrypoint.check_entrypoint,
                  features.check_context_fits, features.check_reasoning_family, vllm.check_max_model_len_unknown,
                  gpu.check_xpu_by_path, resources.check_limits, paths.check_argv_paths, cache.check_hf_cache)
"""The per-service rules, one module per rule family (``compose/rules/<family>.py``)."""


def check_compose_text(text: str, *, file: str | None = None, catalog: Catalog | None = None,
                       expect: CheckExpectations | None = None) -> list[Finding]:
    """Check one compose document and return its findings, sorted by line.

    Args:
        text: the compose file's text (YAML).
        file: the file name to put in each finding (display only; nothing is read).
        catalog: the image catalog (per-digest facts, and vLLM facts extracted from the image).
            ``None`` or an unknown digest: the facts are inferred from the repository and tag
            (:func:`servedeck.model.catalog.infer_facts`) and the rules run on them, with one
            info finding ``image/unknown-digest`` per service saying so.
        expect: what the caller knows (host render gid, whether servedeck rendered the file).

    Returns:
        Findings (possibly empty). A YAML syntax error is a single ``yaml/syntax`` error finding,
        never an exception.

    Raises:
        Nothing for bad input; exceptions are bugs.
    """
    ctx = _document_context(text, file, catalog, expect)
    return ctx if isinstance(ctx, list) else _check(ctx, services(ctx))


def check_rendered(rendered: Rendered, catalog: Catalog | None, *, render_gid: str | None = None,
                   startup_seconds: float | None = None) -> list[Finding]:
    """:func:`check_compose_text` of a file servedeck rendered, on what the renderer read from
    it already (:class:`servedeck.compose.render.Rendered`: its parsed text and its services as
    they will run): the text is not parsed and no command read a second time.

    Args:
        rendered: the rendered profile. Findings name the file ``profile:NAME``.
        catalog: the catalog the profile was rendered with (the services' facts are its).
        render_gid / startup_seconds: what the caller knows of the card host and of the
            profile's last runs (:class:`CheckExpectations`); a rendered file has no ``.env``,
            ``env_file`` or ``extends`` file read beside it.
    """
    ctx = Ctx(doc=rendered.doc, file=f"profile:{rendered.profile.name}", catalog=catalog,
              expect=CheckExpectations(rendered=True, render_gid=render_gid, startup_seconds=startup_seconds))
    return _check(ctx, list(rendered.services))


def check_compose_file(path: str | PathLike[str], *, file: str | None = None,
                       catalog: Catalog | None = None) -> tuple[str, list[Finding]]:
    """Check the compose file at ``path`` as Compose reads it in its directory (the project
    directory): :func:`check_compose_text` with the variables of its ``.env``, the ``env_file``
    files its services name and the files they ``extends``, read from the one parse of the file.

    Returns:
        (the file's text, its findings sorted by line).

    Raises:
        FileNotFoundError: no such file.
        ServedeckError: it cannot be read, is larger than servedeck reads
            (:data:`servedeck.yamlio.LIMITS`) or is not UTF-8 (naming the line).
    """
    from servedeck.compose.document import dotenv_variables, env_file_variables, extends_files
    from servedeck.fsutil import read_bounded
    from servedeck.yamlio import LIMITS
    path = Path(path)
    text = read_bounded(path, LIMITS.max_bytes, what="compose")
    ctx = _document_context(text, file, catalog, None)
    if isinstance(ctx, list):
        return text, ctx
    data = ctx.doc.data
    ctx.expect = CheckExpectations(variables=dotenv_variables(path), env_files=env_file_variables(path, data),
                                   extends_files=extends_files(path, data))
    return text, _check(ctx, services(ctx))


def _check(ctx: Ctx, svcs: list[Service]) -> list[Finding]:
    """Every rule over a parsed document's context and its services as they will run
    (:func:`servedeck.compose.rules._context.services`); its findings, sorted by line."""
    schema.check_schema(ctx)
    keys.check_keys(ctx)
    yaml11.check_yaml11(ctx)
    interpolation.check_interpolation(ctx)
    for svc in svcs:
        for rule in _SERVICE_RULES:
            rule(ctx, svc)
    gpu.check_shared_gpus(ctx, svcs)
    deps.check_depends_on(ctx, svcs)
    ports.check_host_ports(ctx, svcs)
    container.check_container_names(ctx, svcs)
    return _tidy(ctx.findings)


def schema_findings(text: str, *, file: str | None = None) -> list[Finding]:
    """Only what Compose itself refuses in a document: the ``yaml/syntax`` and ``schema/*``
    findings of :func:`check_compose_text` (the Compose Specification schema), sorted by line."""
    ctx = _document_context(text, file, None, None)
    if isinstance(ctx, list):
        return ctx
    schema.check_schema(ctx)
    return _tidy(ctx.findings)


def _document_context(text: str, file: str | None, catalog: Catalog | None,
                      expect: CheckExpectations | None) -> Ctx | list[Finding]:
    """The check context of a parsed document, or the findings that end the check: a YAML
    syntax error, or a document that is not a mapping."""
    try:
        doc = parse(text, file)
    except DocError as exc:
        return [exc.finding]
    ctx = Ctx(doc=doc, file=file, catalog=catalog, expect=expect or CheckExpectations())
    if not isinstance(doc.data, dict):
        ctx.error("schema/type", (), "a compose file is a mapping (services:, volumes:, ...)",
                  "start the file with `services:`")
        return ctx.findings
    return ctx


def _tidy(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, int | None, str]] = set()
    out = []
    for f in findings:
        key = (f.rule, f.line, f.message)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    out.sort(key=lambda f: (f.line if f.line is not None else 0, _RANK[f.severity]))
    return out


def format_findings(findings: list[Finding]) -> str:
    """Terminal text: one block per finding (see :meth:`Finding.render`) and a summary line
    (``2 errors, 1 warning, 0 infos`` or ``no findings``)."""
    if not findings:
        return "no findings"
    counts = {s: sum(1 for f in findings if f.severity is s) for s in Severity}
    parts = [f"{counts[s]} {s.value}{'' if counts[s] == 1 else 's'}" for s in Severity]
    return "\n".join(f.render() for f in findings) + "\n" + ", ".join(parts)


def findings_to_json(findings: list[Finding]) -> str:
    """JSON array of findings (``severity, rule, path, message, hint, line, file``), indented."""
    return json.dumps([f.model_dump(mode="json") for f in findings], indent=2)


Judge = Callable[[str, list[list[str]], "list[str] | None", "str | None"], list[Any]]
"""The in-image dry run a check asks: ``judge(image, commands, entrypoint, mode)`` gives one
verdict per command (``ok``, ``stage``, ``message``, ``cached``, ``seconds``); the host layer
makes one for an engine (:func:`servedeck.host.inimage.judge`), so the check runs nothing itself."""


def check_in_image(text: str, *, judge: Judge, file: str | None = None,
                   catalog: Catalog | None = None) -> list[Finding]:
    """The in-image dry run for every service of a compose document: the image's own launcher
    gives the final vLLM command and vLLM's own parser and serve-args validation judge it,
    inside the image, with no GPU (:func:`servedeck.host.inimage.dry_run_each`, cached per
    (image, argv)).

    Args:
        text: the compose file's text.
        file: the file name to put in each finding.
        judge: the dry run (:data:`Judge`; :func:`servedeck.host.inimage.judge` on an engine).
        catalog: the image catalog (the services' launchers: :class:`servedeck.compose.service.Service`).

    Returns:
        ``inimage/rejected`` (error, vLLM's own message) or ``inimage/accepted`` (info) per
        service with an image and a list-form command; ``inimage/skipped`` (info) for a service
        whose ``entrypoint:`` does not start vLLM directly or whose launcher is not judged in the
        image; ``inimage/not-judged`` (error, with the reason) when the image cannot be had
        (no Docker engine, not present and not pullable, cannot be run).
    """
    return check_in_image_each([(text, file)], judge=judge, catalog=catalog)


def check_in_image_each(documents: list[tuple[str, str | None]], *, judge: Judge,
                        catalog: Catalog | None = None) -> list[Finding]:
    """:func:`check_in_image` of several compose documents (``(text, file)`` pairs): the
    commands not yet judged are judged in one throw-away container per image, whatever the
    number of documents (``check --all --in-image``). An image the judge cannot get (not
    present, not pullable: a ServedeckError) leaves its commands ``inimage/not-judged`` (error)
    and the other images are still judged. Findings in document order."""
    from servedeck.compose.service import read_services
    from servedeck.launchers.server import start_of, wrapper_length
    jobs: list[tuple[Ctx, tuple, str, list[str], tuple[str, ...] | None, str | None]] = []
    # (document, path, image, command, the start an entrypoint: gives (None: the image's own), how it is judged)
    per_document: list[list[Finding]] = []
    for text, file in documents:
        try:
            doc = parse(text, file)
        except DocError as exc:
            per_document.append([exc.finding])
            continue
        ctx = Ctx(doc=doc, file=file, catalog=catalog, expect=CheckExpectations())
        per_document.append(ctx.findings)  # filled below, as the verdicts come
        for svc in read_services(doc.data, catalog=catalog):
            data = svc.data
            if not isinstance(data.get("image"), str) or not isinstance(data.get("command") or [], list):
                continue
            command = [str(c) for c in data.get("command") or []]
            # without an entrypoint: the image's own ENTRYPOINT runs the command, so the launcher it
            # starts decides how the command is judged (dry_run_each reads it from the image)
            start, mode = None, None
            if "entrypoint" in data:
                entry = data["entrypoint"]
                whole = [str(e) for e in entry] + command if isinstance(entry, list) else []
                launcher, n = start_of(whole)
                if (launcher is None or launcher.in_image not in ("serve", "api_server")
                        or wrapper_length(whole)):
                    ctx.info("inimage/skipped", svc.path + ("entrypoint",),
                             "entrypoint: does not start vLLM directly (a wrapper, a shell, the image's "
                             "launcher replaced by another program); the in-image dry run judges vLLM "
                             "started by the image's own entrypoint or by `vllm serve` / the api_server module")
                    continue
                start, command, mode = tuple(whole[:n]), whole[n:], launcher.in_image
            elif svc.launcher is not None and svc.launcher.in_image is None:
                ctx.info("inimage/skipped", svc.path + ("command",),
                         f"the {svc.launcher.name} launcher's commands are not judged in the image: the dry "
                         "run judges vLLM's own starts and launchers that print their final command")
                continue
            jobs.append((ctx, svc.path + ("command",), data["image"], command, start, mode))
    for ref, start, mode in dict.fromkeys((job[2], job[4], job[5]) for job in jobs):
        mine = [job for job in jobs if (job[2], job[4], job[5]) == (ref, start, mode)]
        try:
            verdicts = judge(ref, [job[3] for job in mine], list(start) if start is not None else None, mode)
        except ServedeckError as exc:  # one image it cannot get: the others are still judged
            for ctx, path, *_ in mine:
                ctx.error("inimage/not-judged", path, f"not judged in the image: {exc.message}",
                          exc.hint or "make the image available to this Docker engine, then check again")
            continue
        for (ctx, path, *_), res in zip(mine, verdicts):
            how = " (cached)" if res.cached else f" ({res.seconds:.1f} s)"
            if res.ok:
                ctx.info("inimage/accepted", path, f"vLLM in {ref} accepts the command{how}")
            else:
                ctx.error("inimage/rejected", path,
                          f"vLLM in the image rejects the command at {res.stage}{how}: {res.message}",
                          "fix the flag or value vLLM names; the server would exit at startup")
    return [f for findings in per_document for f in _tidy(findings)]
