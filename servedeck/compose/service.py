"""The one model of a compose service as it will run: its image and the image's facts, its
launcher, the server command as that launcher reads it, the server's environment and the
effective engine settings, each with its provenance.

A :class:`Service` is read from a service mapping of a compose document as Compose reads it
(``extends`` merged in, values interpolated: :func:`read_services`) by :meth:`Service.read`.
The launcher, the command as it reads it, the server's environment and the effective settings
are computed once, there, in one descent into the launchers
(:func:`servedeck.launchers.server.read_server`, which also says how Compose and Docker start
the server). The check rules, the renderer (which reads the file it wrote, as the check reads
any file), the deploy plan, the A/B comparison and the KV prediction read this one object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from servedeck.compose.document import (Device, DeviceRequest, device_requests, devices, env_items, interpolated,
                                        resolve_extends)
from servedeck.launchers.base import DocPath, EnvItem, Launch, Launcher, LauncherDefaults, Setting
from servedeck.launchers.server import read_server, split_command
from servedeck.model.catalog import Catalog, ImageFacts, ImageRef, image_facts
from servedeck.vllm.kv import KvSettings, kv_settings


@dataclass
class Service:
    """One compose service as it will run.

    Attributes:
        name: the service name. path: its document path (``("services", name)``).
        data: the service mapping as Compose reads it (``extends`` merged, values interpolated;
            the image as written).
        image: the image reference (None when absent or not a string).
        command: the ``command`` as the container gets it (argv items,
            :func:`servedeck.launchers.server.split_command`; None: the image's own).
        facts: the image's facts (catalog or inferred, :func:`servedeck.model.catalog.image_facts`),
            or None.
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
        devices: the ``devices`` entries Compose reads, each with its document path
            (:func:`servedeck.compose.document.devices`).
        device_requests: the GPU device requests (``deploy.resources.reservations.devices``,
            ``gpus``), each with its document path (:func:`servedeck.compose.document.device_requests`).
    """

    name: str
    data: dict[str, Any]
    path: DocPath
    image: ImageRef | None
    facts: ImageFacts | None
    launch: Launch
    command: list[str] | None = None
    defaults: LauncherDefaults | None = None
    env_items: list[EnvItem] = field(default_factory=list)
    environment: list[EnvItem] = field(default_factory=list)
    effective: dict[str, Setting] = field(default_factory=dict)
    devices: list[tuple[DocPath, Device]] = field(default_factory=list)
    device_requests: list[tuple[DocPath, DeviceRequest]] = field(default_factory=list)

    @property
    def launcher(self) -> Launcher | None:
        return self.launch.launcher

    @property
    def release(self) -> tuple[int, int, int] | None:
        """The image's vLLM release (:attr:`ImageFacts.release`), None when unknown."""
        return self.facts.release if self.facts else None

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

    def process_argv(self) -> list[str]:
        """The ``entrypoint`` items then the ``command`` items, as written: Docker runs them as
        one argv (where the file gives no ``entrypoint``, the image's runs first, unwritten)."""
        return (split_command(self.data.get("entrypoint")) or []) + list(self.command or [])

    def server_env(self) -> dict[str, str]:
        """The server's environment as the process gets it (last value per name; unset names
        left out)."""
        out: dict[str, str | None] = {}
        for e in self.environment:
            out.pop(e.key, None)
            out[e.key] = e.value
        return {k: v for k, v in out.items() if v is not None}

    # ------------------------------------------------------------------ reading

    @classmethod
    def read(cls, name: str, data: dict[str, Any], facts: ImageFacts | None, *,
             env_files: Mapping[str, Mapping[str, str] | None] | None = None) -> "Service":
        """Read one service mapping (as Compose reads it).

        Args:
            name: the service name.
            data: the mapping (``extends`` merged, values interpolated).
            facts: the facts of the image it names, as the caller has them: the catalog's or
                inferred (:func:`servedeck.model.catalog.image_facts`), or read from the pulled
                image; None for none.
            env_files: the variables of the ``env_file`` files, by the path as written (None:
                not readable); a file not listed here adds nothing.
        """
        path: DocPath = ("services", name)
        image = ImageRef.of(data.get("image"))
        items = env_items(data, path, env_files or {})
        devs = [(path + ("devices", i), d) for i, d in devices(data)]
        requests = [(path + sub, r) for sub, r in device_requests(data)]
        server = read_server(data.get("entrypoint"), data.get("command"), path, facts,
                             image.repository if image is not None else None, items)
        return cls(name, data, path, image, facts, server.launch, command=split_command(data.get("command")),
                   defaults=server.defaults,
                   env_items=server.env_items, environment=server.environment, effective=server.effective,
                   devices=devs, device_requests=requests)


def read_services(data: Any, *, catalog: Catalog | None = None, variables: Mapping[str, str] | None = None,
                  env_files: Mapping[str, Mapping[str, str] | None] | None = None,
                  extends_files: Mapping[str, Any] | None = None) -> list[Service]:
    """Every service of a compose document's plain data as Compose reads it: its ``extends``
    merged in, then its values interpolated with ``variables`` (the image as written: its pinning
    must not depend on a variable). Services that are not mappings are skipped.

    Args:
        data: the document as plain data. catalog / env_files: as :meth:`Service.read`.
        variables: what Compose substitutes (``.env``, defaults in the file).
        extends_files: other compose documents services ``extends``, by the path as written.
    """
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        return []
    resolved = resolve_extends(data["services"], extends_files or {})
    out = []
    for name, svc in resolved.items():
        if not isinstance(svc, dict):
            continue
        mapping = {k: v if k == "image" else interpolated(v, variables or {}) for k, v in svc.items()}
        facts = image_facts(catalog, ImageRef.of(mapping.get("image")))
        out.append(Service.read(str(name), mapping, facts, env_files=env_files))
    return out


__all__ = ["Service", "read_services"]
