"""The one model of a compose service as it will run: its image and the image's facts, its
launcher, the server command as that launcher reads it, the server's environment and the
effective engine settings, each with its provenance.

A :class:`Service` is read from a service mapping of a compose document as Compose reads it
(``extends`` merged in, values interpolated: :func:`read_services`) by :meth:`Service.read`.
Effective settings are computed once, there, by the service's launcher
(:meth:`servedeck.launchers.base.Launcher.effective`). The check rules, the renderer (which hands
the service of the file it wrote over to the check), the deploy plan, the A/B comparison and the
KV prediction read this one object.

How Compose and Docker start the server (Compose Specification ``entrypoint``/``command``;
Docker runs ENTRYPOINT + CMD as one argv): an ``entrypoint`` replaces the image's and must start
a server a launcher knows (after wrappers such as ``env`` or ``tini``, or as the one plain
command of an ``sh -c`` script); without one, the image's own entrypoint runs the command, and a
command that repeats a server start gives those words to the server as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from servedeck.compose.document import (env_file_paths, interpolated, resolve_extends, shell_script,
                                        split_command)
from servedeck.launchers import registry
from servedeck.launchers.base import DocPath, EnvItem, Launch, Launcher, LauncherDefaults, Setting, Token
from servedeck.model.catalog import Catalog, ImageFacts, ImageRef, infer_facts
from servedeck.vllm.argv import ASSIGNMENT
from servedeck.vllm.kv import KvSettings, kv_settings
from servedeck.vllm.names import release_of

def image_facts(catalog: Catalog | None, image: ImageRef | None) -> ImageFacts | None:
    """The facts of ``image``: the catalog's for its digest, else inferred from its repository
    and tag (:func:`servedeck.model.catalog.infer_facts`, marked ``inferred``), else None."""
    if image is None:
        return None
    facts = catalog.lookup(image.digest) if (catalog is not None and image.digest) else None
    return facts if facts is not None else infer_facts(image.repository, image.tag)


@dataclass
class Service:
    """One compose service as it will run.

    Attributes:
        name: the service name. path: its document path (``("services", name)``).
        data: the service mapping as Compose reads it (``extends`` merged, values interpolated;
            the image as written).
        image: the image reference (None when absent or not a string).
        facts: the image's facts (catalog or inferred, :func:`image_facts`), or None.
        launch: the server command as its launcher reads it (:class:`~servedeck.launchers.base.
            Launch`; ``launch.launcher`` None when the start is not one servedeck knows).
        defaults: the launcher config shipped in the image that the command names, if known.
        env_items: the environment the service itself gives, in order (its ``env_file``
            files as the caller read them, its ``environment``, the ``NAME=value`` words of its
            argv): what Compose hands the container.
        environment: the server's environment, in order: :attr:`env_items`, then what the
            launcher sets over them (a later item wins; value None unsets).
        effective: the effective engine settings by vLLM dest name, each a
            :class:`~servedeck.launchers.base.Setting` (value, source, document path).
    """

    name: str
    data: dict[str, Any]
    path: DocPath
    image: ImageRef | None
    facts: ImageFacts | None
    launch: Launch
    defaults: LauncherDefaults | None = None
    env_items: list[EnvItem] = field(default_factory=list)
    environment: list[EnvItem] = field(default_factory=list)
    effective: dict[str, Setting] = field(default_factory=dict)

    @property
    def launcher(self) -> Launcher | None:
        return self.launch.launcher

    @property
    def device(self) -> str | None:
        return self.facts.device if self.facts else None

    def eff(self, dest: str) -> Any:
        """The effective value of ``dest`` (None when unset or turned off)."""
        e = self.effective.get(dest)
        return None if e is None else e.value

    def settings(self) -> dict[str, Any]:
        """The effective settings as plain values, keyed by vLLM dest name (``effective.json``)."""
        return {k: s.value for k, s in self.effective.items()}

    def kv_settings(self, device: str | None = None) -> KvSettings:
        """The settings that decide vLLM's KV pool (:func:`servedeck.vllm.kv.kv_settings`): the
        effective settings, the server's environment and the image's device (else ``device``,
        else ``cpu``).

        Raises:
            ValueError: ``VLLM_CPU_KVCACHE_SPACE`` is set but not an integer.
        """
        return kv_settings(self.settings(), self.server_env(), self.device or device or "cpu")

    def server_env(self) -> dict[str, str]:
        """The server's environment as the process gets it (last value per name; unset names
        left out)."""
        out: dict[str, str | None] = {}
        for e in self.environment:
            out.pop(e.key, None)
            out[e.key] = e.value
        return {k: v for k, v in out.items() if v is not None}

    def same_as(self, data: dict[str, Any], catalog: Catalog | None) -> bool:
        """Whether reading ``data`` with ``catalog`` would give this service: the same mapping,
        and the same facts for its image."""
        if data != self.data:
            return False
        return image_facts(catalog, self.image) == self.facts

    # ------------------------------------------------------------------ reading

    @classmethod
    def read(cls, name: str, data: dict[str, Any], *, catalog: Catalog | None = None,
             env_files: Mapping[str, Mapping[str, str] | None] | None = None,
             facts: ImageFacts | None = None) -> "Service":
        """Read one service mapping (as Compose reads it).

        Args:
            name: the service name.
            data: the mapping (``extends`` merged, values interpolated).
            catalog: the image catalog (None: facts are inferred from the repository and tag).
            env_files: the variables of the ``env_file`` files, by the path as written (None:
                not readable); a file not listed here adds nothing.
            facts: the image's facts when the caller has them (read from the pulled image):
                used instead of the catalog's.
        """
        path: DocPath = ("services", name)
        image_text = data.get("image")
        image = ImageRef.parse(image_text) if isinstance(image_text, str) else None
        facts = facts if facts is not None else image_facts(catalog, image)
        launch = _launch(data, path, facts, image)
        launcher = launch.launcher
        items = _env_items(data, path, launch, env_files or {})
        svc = cls(name, data, path, image, facts, launch, env_items=items, environment=list(items))
        if launcher is None:
            return svc
        image_path = path + ("image",)
        config = launch.config.s if launch.config is not None else None
        svc.defaults = launcher.defaults(facts.launcher_defaults, config) if facts is not None else None
        svc.environment = launcher.environment(launch, items, svc.defaults, image_path)
        image_port = facts.port if facts is not None and facts.runs is launcher else None
        svc.effective = launcher.effective(launch, svc.defaults, svc.environment, image_port, image_path)
        return svc


def read_services(data: Any, *, catalog: Catalog | None = None, variables: Mapping[str, str] | None = None,
                  env_files: Mapping[str, Mapping[str, str] | None] | None = None,
                  extends_files: Mapping[str, Any] | None = None,
                  known: Iterable[Service] = ()) -> list[Service]:
    """Every service of a compose document's plain data as Compose reads it: its ``extends``
    merged in, then its values interpolated with ``variables`` (the image as written: its pinning
    must not depend on a variable). Services that are not mappings are skipped.

    Args:
        data: the document as plain data. catalog / env_files: as :meth:`Service.read`.
        variables: what Compose substitutes (``.env``, defaults in the file).
        extends_files: other compose documents services ``extends``, by the path as written.
        known: services the caller read already (the renderer's, of the file it wrote): one is
            taken as it is, not read again, when the document's mapping of that name is its
            mapping and its image has the same facts (:meth:`Service.same_as`).
    """
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        return []
    by_name = {s.name: s for s in known}
    resolved = resolve_extends(data["services"], extends_files or {})
    out = []
    for name, svc in resolved.items():
        if not isinstance(svc, dict):
            continue
        mapping = {k: v if k == "image" else interpolated(v, variables or {}) for k, v in svc.items()}
        have = by_name.get(str(name))
        out.append(have if have is not None and have.same_as(mapping, catalog) and not env_files
                   else Service.read(str(name), mapping, catalog=catalog, env_files=env_files))
    return out


# --------------------------------------------------------------------------- the server command


def _tokens(value: Any, path: DocPath) -> tuple[list[Token], bool]:
    if isinstance(value, str):
        return [Token(p, path) for p in split_command(value) or []], True
    if isinstance(value, list):
        return [Token("" if v is None else str(v), path + (i,)) for i, v in enumerate(value)], False
    return [], False


def _shell_script(argv: list[Token]) -> tuple[Token | None, list[Token], list[Token] | None, list[Token]]:
    """:func:`~servedeck.compose.document.shell_script` on argv items: (the SCRIPT item, the
    items after a one-word SCRIPT, the SCRIPT's argv as items at the SCRIPT's path, or None, its
    leading ``NAME=value`` words as items at the SCRIPT's path)."""
    found = shell_script([t.s for t in argv])
    if found is None:
        return None, [], None, []
    i, split, words, assignments = found
    script = argv[i]
    return (script, argv[i + 1:i + 1 + split], None if words is None else [Token(w, script.path) for w in words],
            [Token(w, script.path) for w in assignments])


def _repeat_length(cmd: list[Token], entry: list[str]) -> int:
    """Number of leading command items that repeat an entrypoint (0 if none): a server start a
    launcher knows (:func:`servedeck.launchers.registry.start_of`), or the effective entrypoint
    itself."""
    s = [t.s for t in cmd]
    launcher, n = registry.start_of(s)
    if launcher is not None:
        return n
    if entry and s[: len(entry)] == entry:
        return len(entry)
    return 0


def _launch(data: dict[str, Any], path: DocPath, facts: ImageFacts | None, image: ImageRef | None) -> Launch:
    """The server command of a service: which launcher starts it (an ``entrypoint``'s start,
    else the image's launcher from its facts, else the command's own shape, else inferred facts,
    else a repository that names vLLM) and the command as that launcher reads it."""
    entry_tokens, _ = _tokens(data.get("entrypoint"), path + ("entrypoint",))
    cmd, string_form = _tokens(data.get("command"), path + ("command",))
    has_entry = data.get("entrypoint") is not None
    effective_entry = [t.s for t in entry_tokens] if has_entry else (list(facts.entrypoint) if facts else [])
    launcher: Launcher | None = None
    start: list[Token] = []
    script: Token | None = None
    split: list[Token] = []
    inner: list[Token] | None = None
    env_words: list[Token] = []
    if has_entry:
        # Docker runs entrypoint + command as one argv; a shell's -c script is read as its argv
        argv_tokens = entry_tokens + cmd
        script, split, inner, env_words = _shell_script(argv_tokens)
        if inner is not None:
            argv_tokens = inner
        launcher, n = registry.start_of([t.s for t in argv_tokens])
        if launcher is not None:
            start = argv_tokens[:n]
            effective_entry = [t.s for t in start]
            cmd = argv_tokens[n:]
            env_words += [t for t in argv_tokens[:n] if ASSIGNMENT.fullmatch(t.s)]  # env NAME=v
    elif facts is not None and not facts.inferred:
        launcher = facts.runs
    elif cmd and (found := registry.of_arguments([t.s for t in cmd])) is not None:
        launcher = found
    elif facts is not None:
        launcher = facts.runs
    elif image is not None:
        launcher = registry.of_repository_name(image.repository)

    repeat = _repeat_length(cmd, effective_entry) if launcher is not None else 0
    version = release_of(facts.vllm_version) if facts else None
    launch = launcher.read(cmd[repeat:], version) if launcher is not None else Launch(None, tokens=cmd)
    launch.start_items = start
    launch.repeated_entrypoint = cmd[:repeat]
    launch.string_form = string_form
    launch.shell_script, launch.shell_split = script, split
    launch.entry_unknown = has_entry and launcher is None
    launch.shell_plain = script is not None and inner is not None
    launch.env_words = env_words
    # the start is known: written in the file, or the image's own (not guessed from its name)
    launch.start_known = launcher is not None and (has_entry or bool(repeat)
                                                   or (facts is not None and not facts.inferred))
    return launch


def _env_items(data: dict[str, Any], path: DocPath, launch: Launch,
               env_files: Mapping[str, Mapping[str, str] | None]) -> list[EnvItem]:
    """The environment the service gives, in order (a later item overrides an earlier one): its
    ``env_file`` files, its ``environment`` (mapping or list form), then the ``NAME=value``
    words its argv sets (:attr:`Launch.env_words`)."""
    out = [EnvItem(k, v, path + where, True) for where, file, _ in env_file_paths(data.get("env_file"))
           for k, v in (env_files.get(file) or {}).items()]
    env = data.get("environment")
    base = path + ("environment",)
    if isinstance(env, dict):
        for k, v in env.items():
            out.append(EnvItem(str(k), None if v is None else str(v), base + (str(k),), False))
    elif isinstance(env, list):
        for i, item in enumerate(env):
            if isinstance(item, str):
                k, eq, v = item.partition("=")
                out.append(EnvItem(k, v if eq else None, base + (i,), True))
    for t in launch.env_words:
        k, _, v = t.s.partition("=")
        out.append(EnvItem(k, v, t.path, True))
    return out


__all__ = ["Service", "image_facts", "read_services"]
