"""Ask an image about itself through Docker: its config and vLLM facts, and vLLM's own verdict
on a server command (the in-image dry run). No GPU, no network, no model is needed: each step
is a throw-away container (``--network none``) running the image's own python on
:mod:`servedeck.vllm.introspect`.

Steps and their upstream contracts:

* image config: ``docker image inspect`` ``Config`` (Entrypoint, Cmd, WorkingDir, Env, Labels)
  through the docker SDK (``DockerClient.images.get``);
* the final command: for the exl3xpu launcher (``scripts/serve.py``) the launcher's own
  ``--print`` (``ZE_AFFINITY_MASK=<gpu> <shell-quoted argv>``), run in the same container as
  the verdict; for a ``vllm serve`` entrypoint the command items as they are;
* the verdict: ``make_arg_parser`` + ``validate_parsed_serve_args`` + the JSON-valued configs,
  inside the image (see :func:`servedeck.vllm.introspect.dryrun`).

Verdicts are cached per (image id, argv) in memory and in ``<cache_dir>/dryrun/<key>.json``
(default ``$XDG_CACHE_HOME/servedeck``), so repeating a dry run costs a file read.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write, cache_dir

_MARK = "@@SERVEDECK@@"
_SCRIPT = Path(__file__).resolve().parent.parent / "vllm" / "introspect.py"
_MEMO: dict[str, "DryRunResult"] = {}


THROWAWAY_LABEL = "io.servedeck.throwaway"
"""Label of the throw-away containers of the facts extraction and the dry run."""


def local_client() -> Any:
    """A docker SDK client for the local engine (``DOCKER_HOST`` honoured).

    Raises:
        ServedeckError: no engine answers.
    """
    import docker
    try:
        client = docker.from_env(timeout=300)
        client.ping()
        return client
    except Exception as exc:  # docker.errors.DockerException, requests errors
        raise ServedeckError(f"no Docker engine reachable: {exc}",
                             hint="start Docker, or set DOCKER_HOST; without it `invoke check` "
                                  "uses the catalog and repository hints only") from None


def _client(client_or_host: Any) -> Any:
    if client_or_host is None:
        return local_client()
    if hasattr(client_or_host, "engine"):  # servedeck.host.remote.RemoteHost: its forwarded Engine
        return client_or_host.engine.client
    return client_or_host


def _image(client: Any, ref: str) -> Any:
    import docker
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            return client.images.pull(ref)
        except docker.errors.DockerException as exc:
            raise ServedeckError(f"image {ref} is not present and cannot be pulled: {exc}",
                                 hint="pull it on this engine first (docker pull REF)") from None


RUN_TIMEOUT_S = 600
"""Seconds a throw-away container may run before the dry run gives up on it (a vLLM import takes
~10 s on the test machines; an image whose program does not finish, such as a server, never
ends on its own)."""


def _run(client: Any, image: Any, entrypoint: list[str] | None, command: list[str],
         **extra: Any) -> tuple[int, str]:
    """Run a throw-away container (``extra``: further ``containers.run`` keywords such as
    ``volumes`` and ``environment``); returns (exit code, stdout+stderr text).

    Raises:
        ServedeckError: the container did not finish within :data:`RUN_TIMEOUT_S` (it is removed).
    """
    kw: dict[str, Any] = {"network_mode": "none", "detach": True, "labels": {THROWAWAY_LABEL: "1"}, **extra}
    if entrypoint is not None:
        kw["entrypoint"] = entrypoint
    container = client.containers.run(image.id, command=command, **kw)
    try:
        try:
            status = container.wait(timeout=RUN_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the SDK's read timeout (requests), without importing it
            if "timed out" not in str(exc).lower():
                raise
            raise ServedeckError(f"the dry run in {image.id[:19]} did not finish within {RUN_TIMEOUT_S} s",
                                 hint="the image's program may not be one that exits (a server, a shell)") from None
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        container.remove(force=True)
    return int(status.get("StatusCode", 1)), out + ("\n" + err if err else "")


def _introspect(client: Any, image: Any, args: list[str], **extra: Any) -> dict[str, Any]:
    script = _SCRIPT.read_text(encoding="utf-8")
    code, text = _run(client, image, ["python3", "-c", script], args, **extra)
    if _MARK not in text:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise ServedeckError(f"the image's python could not run servedeck's vLLM introspection "
                             f"(exit {code}): {tail}",
                             hint="the image needs python3 with vLLM importable on its PATH")
    return json.loads(text.rsplit(_MARK, 1)[1].splitlines()[0])


def _digest(image: Any, ref: str) -> str:
    for rd in image.attrs.get("RepoDigests") or []:
        if "@" in rd:
            return rd.split("@", 1)[1]
    if "@" in ref:
        return ref.split("@", 1)[1]
    return image.id


def _repository(ref: str) -> str:
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""The extraction's container has no network; these keep huggingface_hub from retrying for it."""

def extract_facts(client_or_host: Any, image_ref: str) -> tuple[str, Any, Any]:
    """Read an image's facts from the image itself.

    Args:
        client_or_host: a docker SDK client, a :class:`servedeck.host.remote.RemoteHost`, or
            None for the local engine.
        image_ref: ``repository[:tag][@digest]`` or an image id.

    Returns:
        ``(digest, ImageFacts, VllmFacts)``: the digest (repo digest when the image has one,
        else the image id), the catalog entry (the launcher its ENTRYPOINT starts, else the
        default one; the device the image says it is built for
        (:func:`servedeck.model.catalog.image_device`), else ``cpu``; entrypoint, cmd, workdir,
        env, labels, binaries, the launcher's model configs as it reads them) and vLLM's own facts.

    Raises:
        ServedeckError: no engine, image missing, or the image cannot run the introspection.
    """
    from servedeck.launchers import registry
    from servedeck.model.catalog import ImageFacts, has_healthcheck, image_device
    from servedeck.vllm.facts import VllmFacts

    client = _client(client_or_host)
    image = _image(client, image_ref)
    cfg = image.attrs.get("Config") or {}
    raw = _introspect(client, image, ["facts"], environment=_OFFLINE)
    digest = _digest(image, image_ref)
    raw["source"] = f"extracted from image {_repository(image_ref)} ({digest[:19]}) by servedeck.vllm.introspect"
    vf = VllmFacts.model_validate(raw)
    entry = list(cfg.get("Entrypoint") or [])
    launcher = registry.of_image(entry) or registry.default()
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
    labels = dict(cfg.get("Labels") or {})
    device = image_device(image_ref, labels=labels, env=env, vllm_version=raw.get("vllm_version")) or "cpu"
    defaults = [d for path, text in (raw.get("launcher_configs") or {}).items()
                if (d := launcher.read_config(path, text)) is not None]
    facts = ImageFacts(repository=_repository(image_ref), launcher=launcher.name,
                       vllm_version=vf.vllm_version, device=device,
                       entrypoint=entry, default_port=launcher.default_port, launcher_defaults=defaults,
                       cmd=list(cfg.get("Cmd") or []), workdir=cfg.get("WorkingDir") or None,
                       env=env, labels=labels, binaries=raw.get("binaries") or {},
                       user=cfg.get("User") or "", healthcheck=has_healthcheck(cfg),
                       note=f"read from the image by servedeck.host.inimage ({image.id[:19]})")
    return digest, facts, vf


RELEASE_MOUNT = "/opt/servedeck-release"
"""Where :func:`extract_release_facts` mounts a release's unpacked files (read-only)."""


def extract_release_facts(image_ref: str, release_dir: Path, source: str, *, client: Any = None) -> Any:
    """Read the facts of a vLLM release from that release's own files, with the python and
    libraries of an image that has a vLLM (the project's CPU image): ``release_dir`` (a wheel
    unpacked, ``vllm/`` at its top) is mounted read-only and put first on ``PYTHONPATH``, vLLM's
    CPU platform is set (its detection by distribution version finds none for another
    release's files) and :mod:`servedeck.vllm.introspect` runs ``facts``.

    Args:
        image_ref: the image whose python runs the release (local engine).
        release_dir: the unpacked release (local path; the engine must be local).
        source: recorded as the facts' ``source`` (e.g. the wheel's file name and sha256).
        client: docker SDK client (None: the local engine).

    Returns:
        :class:`servedeck.vllm.facts.VllmFacts` of the release.

    Raises:
        ServedeckError: no engine, the image is missing, or the release's files do not import
            with the image's libraries (the last lines of the error are quoted).
    """
    from servedeck.vllm.facts import VllmFacts
    raw = introspect_facts(image_ref, release_dir=release_dir, client=client)
    raw["source"] = source
    for key in ("python", "binaries", "cwd", "launcher_configs"):
        raw.pop(key, None)  # facts of the image that ran it, not of the release
    return VllmFacts.model_validate(raw)


def introspect_facts(image_ref: str, *, release_dir: Path | None = None, parse: Sequence[list[str]] = (),
                     client: Any = None) -> dict[str, Any]:
    """The extractor's raw ``facts`` output (:mod:`servedeck.vllm.introspect`) for the image's
    own vLLM, or, with ``release_dir``, for the release unpacked there (as
    :func:`extract_release_facts` runs it); with ``parse``, also ``parsed``: what that release's
    ``vllm serve`` parser makes of each argv. One throw-away container, no network.

    Raises:
        ServedeckError: no engine, the image is missing, or the introspection fails.
    """
    client = client or local_client()
    image = _image(client, image_ref)
    args = ["facts", json.dumps([list(a) for a in parse])] if parse else ["facts"]
    if release_dir is None:
        return _introspect(client, image, args, environment=_OFFLINE)
    return _introspect(client, image, ["--platform-cpu", *args],
                       volumes={str(Path(release_dir).resolve()): {"bind": RELEASE_MOUNT, "mode": "ro"}},
                       environment={"PYTHONPATH": RELEASE_MOUNT, **_OFFLINE})


@dataclass
class DryRunResult:
    """vLLM's own verdict on one server command.

    Attributes:
        ok: True when vLLM's parser and serve-args validation accept the command.
        stage: ``launcher`` (the launcher refused / could not print), ``parse``, ``validate``,
            ``config`` (a JSON-valued config rejected a key or value) or ``done``.
        message: vLLM's (or the launcher's) own message.
        vllm_argv: the arguments vLLM receives (after the launcher), without ``vllm serve``.
        image_id: the image id judged.
        cached: True when this verdict came from the cache.
        seconds: wall time spent (0 for a memory-cache hit).
        model: for an accepted command, the model vLLM would serve (its ``args.model``).
        style: how vLLM is started: ``serve`` (the ``vllm`` console script) or ``api_server``.
    """

    ok: bool
    stage: str
    message: str
    vllm_argv: list[str]
    image_id: str
    cached: bool = False
    seconds: float = 0.0
    model: str | None = None
    style: str | None = None


def dry_run(client_or_host: Any, image_ref: str, command: list[str], *,
            use_cache: bool = True, image_id: str | None = None, mode: str | None = None) -> DryRunResult:
    """Judge a server command with the image's own launcher and vLLM, without a GPU
    (:func:`dry_run_each` of one command).

    Args:
        client_or_host: docker SDK client, RemoteHost, or None (local engine).
        image_ref: the pinned image.
        command: the compose ``command`` items (arguments to the image's entrypoint).
        use_cache: read and write the (image id, argv) cache.
        image_id: the image's id (``sha256:...``) when the caller knows it: a cached verdict
            is then returned without an Engine connection.
        mode: how the image's launcher is judged (:attr:`servedeck.launchers.base.Launcher.
            in_image`); None: the launcher the image's ENTRYPOINT starts
            (:func:`servedeck.launchers.registry.of_image`, else the default one).

    Returns:
        A :class:`DryRunResult`; a rejection is ``ok=False`` with vLLM's own message.

    Raises:
        ServedeckError: no engine, the image is missing, it cannot run the introspection, or its
            launcher's commands cannot be judged in the image.
    """
    return dry_run_each(client_or_host, image_ref, [command], use_cache=use_cache, image_id=image_id,
                        mode=mode)[0]


def dry_run_each(client_or_host: Any, image_ref: str, commands: list[list[str]], *,
                 use_cache: bool = True, image_id: str | None = None,
                 entrypoint: list[str] | None = None, mode: str | None = None) -> list[DryRunResult]:
    """Judge several server commands for one image: the cached verdicts are read, and all
    the others come from ONE throw-away container (one vLLM import, ~10 s on the test
    machines, instead of one per command), or one per :data:`ARGUMENT_LIMIT` bytes of commands
    (:func:`argument_batches`).

    Args and Raises: as :func:`dry_run`; ``commands`` is a list of compose ``command`` lists;
    ``entrypoint``: the start the commands are arguments to (a compose ``entrypoint`` such as
    ``["vllm", "serve"]``), instead of the image's own ENTRYPOINT; ``mode``: as :func:`dry_run`.

    Returns:
        One :class:`DryRunResult` per command, in order (``seconds``: the time of the call that
        judged it, shared by the commands judged together).
    """
    t0 = time.perf_counter()
    client = image = None
    if image_id is None:
        client = _client(client_or_host)
        image = _image(client, image_ref)
        image_id = image.id
    keys = [hashlib.sha256(json.dumps([_script_sha(), image_id, entrypoint, mode, list(c)]).encode()).hexdigest()[:32]
            for c in commands]
    results = [_cached(key, t0) if use_cache else None for key in keys]
    # the first of each distinct command without a cached verdict
    todo = [i for i, key in enumerate(keys) if results[i] is None and key not in keys[:i]]
    if not todo:
        return results  # type: ignore[return-value]
    unable = cache_dir() / "dryrun" / f"unable-{image_id.replace(':', '-')}.txt"
    if use_cache and unable.exists():  # this image cannot run the introspection at all
        raise ServedeckError(unable.read_text(encoding="utf-8").strip(),
                             hint="the image needs python3 with vLLM importable on its PATH")
    if image is None:
        client = _client(client_or_host)
        image = _image(client, image_ref)
    entry = list(entrypoint) if entrypoint is not None else list(
        (image.attrs.get("Config") or {}).get("Entrypoint") or [])
    if mode is None:
        from servedeck.launchers import registry
        launcher = registry.of_image(entry) or registry.default()
        if launcher.in_image is None:
            raise ServedeckError(f"the {launcher.name} launcher of {image_ref} cannot be judged in the image",
                                 hint="the in-image dry run judges vLLM's own starts and launchers that print "
                                      "their final command")
        mode = launcher.in_image
    verdicts: list[dict[str, Any]] = []
    try:
        for batch in argument_batches([list(commands[i]) for i in todo]):
            out = _introspect(client, image, ["launch-dryrun-each", json.dumps(entry), batch, mode])
            verdicts += out.get("verdicts") or []
    except ServedeckError as exc:
        if use_cache:
            atomic_write(unable, exc.message + "\n")
        raise
    seconds = time.perf_counter() - t0
    fresh: dict[str, DryRunResult] = {}
    for i, verdict in zip(todo, verdicts):
        res = fresh[keys[i]] = DryRunResult(bool(verdict.get("ok")), str(verdict.get("stage")),
                                            str(verdict.get("message")), list(verdict.get("argv") or []),
                                            image.id, seconds=seconds, model=verdict.get("model"),
                                            style=verdict.get("style"))
        if use_cache:
            _MEMO[keys[i]] = res
            path = _verdict_path(keys[i])
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(asdict(res)) + "\n")
    for i, key in enumerate(keys):  # the judged ones, and repeats of a command judged here
        if results[i] is None:
            if key not in fresh:
                raise ServedeckError(f"the dry run in {image_ref} gave no verdict for "
                                     f"{' '.join(commands[i])[:200]}")
            results[i] = fresh[key] if i in todo else DryRunResult(**{**asdict(fresh[key]), "cached": True})
    return results  # type: ignore[return-value]


ARGUMENT_LIMIT = 100_000
"""Bytes of one JSON argument of the dry run's container command. Linux refuses a single
argument string over ``MAX_ARG_STRLEN`` (32 pages, 131,072 bytes: ``include/uapi/linux/binfmts.h``)
with E2BIG, "argument list too long"."""


def argument_batches(commands: list[list[str]], limit: int | None = None) -> list[str]:
    """``commands`` as JSON lists, in order, each at most ``limit`` bytes (UTF-8; default
    :data:`ARGUMENT_LIMIT`) unless one command alone is longer (it then goes alone): one
    container judges each batch."""
    limit = ARGUMENT_LIMIT if limit is None else limit
    out: list[str] = []
    batch: list[str] = []
    size = 2
    for c in commands:
        item = json.dumps(c)
        n = len(item.encode()) + (1 if batch else 0)
        if batch and size + n > limit:
            out.append("[" + ",".join(batch) + "]")
            batch, size, n = [], 2, len(item.encode())
        batch.append(item)
        size += n
    if batch:
        out.append("[" + ",".join(batch) + "]")
    return out


def _script_sha() -> str:
    """The sha256 of :mod:`servedeck.vllm.introspect`'s text: a cached verdict is one that
    script gave (a changed dry run judges again)."""
    global _SCRIPT_SHA
    if _SCRIPT_SHA is None:
        _SCRIPT_SHA = hashlib.sha256(_SCRIPT.read_bytes()).hexdigest()
    return _SCRIPT_SHA


_SCRIPT_SHA: str | None = None


def _verdict_path(key: str) -> Path:
    """``<cache_dir>/dryrun/<key>.json``: the file cache of one verdict."""
    return cache_dir() / "dryrun" / f"{key}.json"


def _cached(key: str, t0: float) -> DryRunResult | None:
    """The cached verdict of ``key`` (memory, then ``<cache_dir>/dryrun/<key>.json``), or None."""
    if key in _MEMO:
        return DryRunResult(**{**asdict(_MEMO[key]), "cached": True, "seconds": time.perf_counter() - t0})
    path = _verdict_path(key)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        res = DryRunResult(**{**data, "cached": True, "seconds": time.perf_counter() - t0})
    except (ValueError, TypeError):
        return None  # a damaged cache entry is judged again
    _MEMO[key] = res
    return res


def judge(client_or_host: Any = None
          ) -> Callable[[str, list[list[str]], list[str] | None, str | None], list[DryRunResult]]:
    """The in-image dry run as a compose check asks it (``servedeck.compose.check.Judge``):
    ``judge(image, commands, entrypoint, mode)`` is :func:`dry_run_each` of those commands on
    ``client_or_host`` (a docker SDK client, a RemoteHost, or None: the local engine)."""
    def run(image: str, commands: list[list[str]], entrypoint: list[str] | None,
            mode: str | None) -> list[DryRunResult]:
        return dry_run_each(client_or_host, image, commands, entrypoint=entrypoint, mode=mode)
    return run
