"""Typed serving profiles: models, loading from ``profiles/*.yaml``, ``extends:`` and diffs.

A profile describes one serving configuration: the digest-pinned image, the launcher, the
model, vLLM engine settings (vLLM's own dest names), launcher env overrides, container
settings and host-level settings. An unset engine field means "image default" and renders
nothing. A profile may ``extends:`` another one; the child is deep-merged over the parent
(mappings merge, lists and scalars replace, ``null`` deletes the key and so returns it to
the image default). One exception: ``engine.speculative: null`` keeps its meaning
"speculative decoding off", because there absence already means "image default".

File format: YAML 1.2 read with ruamel.yaml; the JSON Schema is ``schema/profile.schema.json``
(generated from :class:`Profile` by ``invoke schema``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator,
                      model_validator)
from servedeck.errors import ServedeckError
from servedeck.grammar import (CONTAINER_NAME_RE, ENV_NAME_RE, PROFILE_NAME_RE, SERVICE_NAME_RE,
                               VOLUME_NAME_RE, check, check_all)
from servedeck.launchers import registry
from servedeck.launchers.base import Launcher, LaunchSettings
from servedeck.model.catalog import Catalog, Device, ImageFacts, ImageRef, image_facts
from servedeck.model.local_images import LocalImages
from servedeck.yamlio import flatten, read_yaml_file

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
IMAGE_RE = re.compile(
    r"^(?P<repository>[a-z0-9][a-z0-9._\-/:]*?[a-z0-9])(?::(?P<tag>[\w][\w.\-]{0,127}))?"
    r"@(?P<digest>sha256:[0-9a-f]{64})$")
NAME_RE = PROFILE_NAME_RE
ENV_NAME_RULE = "letters, digits, '_', '.', '-', not starting with a digit"

ENGINE_FLAGS = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens", "max_num_seqs",
                "kv_cache_dtype", "enable_prefix_caching", "dtype")
"""Engine fields that are plain vLLM flags of the same dest name (printed in this order)."""

#: Engine keys whose ``null`` is a value ("off"), not a deletion, during ``extends:`` merges.
NULL_IS_VALUE = {("engine", "speculative")}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _image_match(ref: str) -> dict[str, str | None]:
    m = IMAGE_RE.match(ref)
    if not m:
        raise ValueError(
            f"image {ref!r} is not pinned by digest; write it as repo@sha256:<64 hex> "
            "(find the digest with `docker buildx imagetools inspect REF` or "
            "`docker inspect --format '{{index .RepoDigests 0}}' REF`)")
    return m.groupdict()


class LauncherSpec(_Strict):
    """How the image turns settings into the server's argv.

    Attributes:
        kind: the launcher's name (:mod:`servedeck.launchers.registry`; the JSON Schema lists
            the known ones): ``exl3xpu`` (scripts/serve.py: positional model config, ``--gpu``,
            ``--model-path``, repeated ``--set KEY.PATH=VALUE``, passthrough vLLM flags),
            ``vllm`` (the image's entrypoint is ``vllm serve``; plain flags) or
            ``vllm-api-server`` (``python -m vllm.entrypoints.openai.api_server``; ``--model``).
        config: the launcher's model config, for a launcher that takes one (exl3xpu: the
            positional, a dir with model.yaml relative to the image WORKDIR, or a .yaml path).
        gpu: the launcher's GPU index option, for a launcher that has one (exl3xpu ``--gpu``,
            which sets ZE_AFFINITY_MASK in the image).
    """

    kind: Annotated[str, WithJsonSchema({"enum": registry.names(), "type": "string"})]
    config: str | None = None
    gpu: int | None = Field(default=None, ge=0)

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        return registry.known_name(v)

    @property
    def runs(self) -> Launcher:
        """The launcher itself (:func:`servedeck.launchers.registry.named`)."""
        return registry.named(self.kind)

    @model_validator(mode="after")
    def _options_it_takes(self) -> "LauncherSpec":
        launcher = registry.find(self.kind)
        if launcher is None:
            return self
        if launcher.config_option and not self.config:
            raise ValueError(f"launcher.config is required for the {self.kind} launcher: "
                             f"{launcher.config_option}")
        if self.config and not launcher.config_option or self.gpu is not None and not launcher.gpu_option:
            takes = [n for n, ok in (("launcher.config", launcher.config_option),
                                     ("launcher.gpu", launcher.gpu_option)) if not ok]
            raise ValueError(f"the {self.kind} launcher takes no {' and no '.join(takes)}")
        return self


class ModelSpec(_Strict):
    """The model: where the server reads it from, and the served name(s).

    Two ways, exactly one per profile:

    * local weights: ``weights_dir`` (host path) bind-mounted at ``mount``; the model argument
      is ``mount`` (``--model-path`` for exl3xpu);
    * a Hugging Face repo id (``repo_id``, not with a launcher that reads the weights from its own
      option, such as exl3xpu's ``--model-path``): vLLM resolves it through the
      Hugging Face cache, which ``hf_cache`` mounts into the container (usually at
      ``/root/.cache/huggingface``); the model argument is the repo id.

    Attributes:
        weights_dir: host path of the weights; relative paths resolve against the host's
            working directory (where the compose file lives).
        mount: container path the weights are mounted at.
        mount_options: bind options after the second colon, e.g. ``Z`` (SELinux private
            label), ``ro,Z``.
        repo_id: Hugging Face repo id (``org/name``) passed to vLLM as the model.
        hf_cache: the Hugging Face cache mount (host path or named volume → container path).
        served_model_name: one or more names; the API and metrics use the first.
    """

    weights_dir: str | None = None
    mount: str | None = None
    mount_options: str | None = None
    repo_id: str | None = None
    hf_cache: "Volume | None" = None
    served_model_name: Annotated[list[str], WithJsonSchema({
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
        "description": "one name or a list; the API and metrics use the first"})] = Field(min_length=1)

    @field_validator("served_model_name", mode="before")
    @classmethod
    def _one_name(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("served_model_name")
    @classmethod
    def _clean_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if name != name.strip() or not name:
                raise ValueError(f"served model name {name!r} has leading/trailing whitespace")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> "ModelSpec":
        local = self.weights_dir is not None or self.mount is not None
        if local and self.repo_id is not None:
            raise ValueError("give either weights_dir + mount (local weights) or repo_id "
                             "(Hugging Face repo id served from the cache), not both")
        if local and (self.weights_dir is None or self.mount is None):
            raise ValueError("local weights need both weights_dir (host path) and mount "
                             "(container path)")
        if not local and self.repo_id is None:
            raise ValueError("model needs weights_dir + mount (local weights) or repo_id "
                             "(a Hugging Face repo id, e.g. Qwen/Qwen3-8B)")
        if self.hf_cache is not None and self.repo_id is None:
            raise ValueError("hf_cache only applies with repo_id")
        if self.mount_options is not None and not local:
            raise ValueError("mount_options only applies to local weights")
        return self

    @property
    def argument(self) -> str:
        """The model argument the server gets: the mount path or the repo id."""
        return self.mount if self.mount is not None else str(self.repo_id)


class Speculative(_Strict):
    """Speculative decoding (vLLM ``--speculative-config``).

    Attributes:
        method: vLLM method name (``mtp``, ``qwen3_5_mtp``, ``ngram``, ...); unset keeps the
            image's method (exl3xpu edits only the given keys).
        num_speculative_tokens: draft tokens per step (> 0).
        options: further speculative_config keys verbatim (e.g. ``prompt_lookup_max``).
    """

    method: str | None = None
    num_speculative_tokens: int | None = Field(default=None, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)

    def as_config(self) -> dict[str, Any]:
        """The speculative_config mapping with only the set keys, method first."""
        out: dict[str, Any] = {}
        if self.method is not None:
            out["method"] = self.method
        if self.num_speculative_tokens is not None:
            out["num_speculative_tokens"] = self.num_speculative_tokens
        out.update(self.options)
        return out


class EngineSettings(_Strict):
    """vLLM engine settings, named as vLLM's argparse dests. Unset = image default.

    Attributes:
        gpu_memory_utilization: fraction of total device memory, 0 < x <= 1.
        max_model_len: tokens per request (context length).
        max_num_batched_tokens: scheduler token budget per step (chunked-prefill chunk).
        max_num_seqs: concurrent sequences.
        enable_prefix_caching: automatic prefix caching (APC).
        kv_cache_dtype: ``auto``, ``fp8``, ...
        dtype: the weights' and activations' data type (vLLM ``--dtype``: ``auto``,
            ``bfloat16``, ``float16``, ``float32``, ...): a quality variable (it changes what the
            model computes).
        speculative: speculative decoding; ``null`` turns it off, unset keeps the image's.
        enable_auto_tool_choice: ``--enable-auto-tool-choice`` (needs tool_call_parser).
        tool_call_parser: vLLM tool-call parser name.
        reasoning_parser: vLLM reasoning parser name.
        extra_args: further vLLM flags, one argv token per item, passed through verbatim.
    """

    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    enable_prefix_caching: bool | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    speculative: Speculative | None = None
    enable_auto_tool_choice: bool | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    extra_args: list[str] = Field(default_factory=list)

    @property
    def speculative_state(self) -> Literal["default", "off", "set"]:
        """``default`` (unset), ``off`` (explicit null) or ``set``."""
        if "speculative" not in self.model_fields_set:
            return "default"
        return "off" if self.speculative is None else "set"

    @model_validator(mode="after")
    def _tool_choice_needs_parser(self) -> "EngineSettings":
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("enable_auto_tool_choice needs tool_call_parser "
                             "(vLLM: --enable-auto-tool-choice requires --tool-call-parser)")
        return self


class Volume(_Strict):
    """A bind mount or named volume (Compose short syntax ``source:target[:options]``).

    Attributes:
        source: host path (``./cache``, ``/data``) or a named volume (``vllm-compile-cache``).
        target: container path.
        options: ``ro``, ``Z``, ``ro,Z``, ...
    """

    source: str
    target: str
    options: str | None = None

    @property
    def is_named(self) -> bool:
        """True for a named volume (source is not a path)."""
        return not self.source.startswith(("/", ".", "~", "$"))

    @model_validator(mode="after")
    def _named_volume_is_a_name(self) -> "Volume":
        if self.is_named:
            check(VOLUME_NAME_RE, self.source, "named volume", "letters, digits, '_', '.', '-' "
                  "(a path starts with '/', '.' or '~')")
        return self


ModelSpec.model_rebuild()


class Container(_Strict):
    """Compose service settings.

    Attributes:
        service: the Compose service name.
        container_name: fixed container name, if any.
        restart: Compose restart policy (``"no"``, ``always``, ``on-failure[:N]``, ``unless-stopped``).
        port: the port the server listens on inside the container.
        host_port: published host port (defaults to ``port``).
        host_ip: publish on this host address only (``127.0.0.1``); default all addresses.
        devices: device paths (``/dev/dri``).
        group_add: supplementary groups: the host's render GID as a string (``"992"``).
        environment: container environment (exl3xpu: model.yaml env overrides it, see
            ``launcher_env``).
        volumes: further mounts after the weights mount.
        shm_size: ``/dev/shm`` size (``8g``); vLLM CPU needs at least 1 GiB.
        ipc: IPC mode (``host``).
        compose_extra: further service keys servedeck does not model (``deploy`` GPU
            reservations, ``gpus``, ``healthcheck``, ``ulimits``, ``runtime``, ...), rendered
            back verbatim after the modelled keys (Compose Specification service syntax;
            values are file text, so a literal ``$`` is written ``$$``).
    """

    service: str = "vllm"
    container_name: str | None = None
    restart: str = "no"
    port: int = Field(default=8000, ge=1, le=65535)
    host_port: int | None = Field(default=None, ge=1, le=65535)
    host_ip: str | None = None
    devices: list[str] = Field(default_factory=list)
    group_add: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    volumes: list[Volume] = Field(default_factory=list)
    shm_size: str | None = None
    ipc: str | None = None
    compose_extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def device(self) -> Device:
        """The device these settings give the server: ``xpu`` with ``/dev/dri``, ``cuda`` with an
        NVIDIA request (a CDI ``nvidia.com/...`` device; in ``compose_extra``: ``gpus``,
        ``runtime: nvidia``, or a ``deploy.resources.reservations.devices`` entry with the
        ``nvidia`` driver or the ``gpu`` capability, as Compose reads them), else ``cpu``."""
        if any(d.startswith("/dev/dri") for d in self.devices):
            return "xpu"
        x = self.compose_extra
        node: Any = x
        for key in ("deploy", "resources", "reservations", "devices"):
            node = node.get(key) if isinstance(node, dict) else None
        nvidia = isinstance(node, list) and any(
            isinstance(r, dict) and (r.get("driver") == "nvidia" or "gpu" in (r.get("capabilities") or []))
            for r in node)
        if nvidia or x.get("gpus") or x.get("runtime") == "nvidia" \
                or any(d.startswith("nvidia.com/") for d in self.devices):
            return "cuda"
        return "cpu"

    @field_validator("compose_extra")
    @classmethod
    def _not_modelled(cls, v: dict[str, Any]) -> dict[str, Any]:
        modelled = {"image", "command", "container_name", "restart", "ports", "devices",
                    "group_add", "shm_size", "ipc", "environment", "volumes"}
        clash = sorted(set(v) & modelled)
        if clash:
            raise ValueError(f"compose_extra repeats modelled keys {clash}: set them in their "
                             "own fields")
        return v

    @field_validator("service")
    @classmethod
    def _service(cls, v: str) -> str:
        return check(SERVICE_NAME_RE, v, "service name", "letters, digits, '.', '_', '-' (Compose)")

    @field_validator("container_name")
    @classmethod
    def _container_name(cls, v: str | None) -> str | None:
        return v if v is None else check(CONTAINER_NAME_RE, v, "container name",
                                         "a letter or digit, then letters, digits, '_', '.', '-' (Compose)")

    @field_validator("environment")
    @classmethod
    def _environment_names(cls, v: dict[str, str]) -> dict[str, str]:
        return check_all(ENV_NAME_RE, v, "environment variable name", ENV_NAME_RULE)

    @field_validator("restart")
    @classmethod
    def _restart(cls, v: str) -> str:
        if not re.fullmatch(r"no|always|unless-stopped|on-failure(:\d+)?", v):
            raise ValueError(f"restart {v!r} is not a Compose restart policy "
                             "(no, always, on-failure[:N], unless-stopped)")
        return v

    @field_validator("group_add")
    @classmethod
    def _gids(cls, v: list[str]) -> list[str]:
        for gid in v:
            if not gid.strip() or gid != gid.strip():
                raise ValueError(f"group {gid!r} is empty or has whitespace")
        return v


class HostSettings(_Strict):
    """Host-level settings that are not part of the container (recorded, applied later).

    Attributes:
        power_cap_w: GPU power cap in W.
    """

    power_cap_w: int | None = Field(default=None, gt=0)


class Profile(_Strict):
    """One serving configuration (the resolved result of a profile file and its parents).

    Attributes:
        name: profile name (file stem).
        description: free text.
        extends: the parent profile's name, if any.
        image: ``repo[:tag]@sha256:<64 hex>``.
        launcher, model, engine, container, host: see their classes.
        launcher_env: environment overrides applied by a launcher that edits its config (exl3xpu:
            ``--set env.NAME=VALUE``, since model.yaml env overrides the container environment);
            ``null`` unsets.
    """

    name: str
    description: str | None = None
    extends: str | None = None
    image: str = Field(json_schema_extra={"pattern": re.sub(r"\?P<\w+>", "", IMAGE_RE.pattern)})
    launcher: LauncherSpec
    model: ModelSpec
    engine: EngineSettings = Field(default_factory=EngineSettings)
    launcher_env: dict[str, str | None] = Field(default_factory=dict)
    container: Container = Field(default_factory=Container)
    host: HostSettings = Field(default_factory=HostSettings)

    @field_validator("image")
    @classmethod
    def _pinned(cls, v: str) -> str:
        _image_match(v)
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"profile name {v!r} must be lower-case letters, digits, '.', '_', '-'")
        return v

    @field_validator("extends")
    @classmethod
    def _extends(cls, v: str | None) -> str | None:
        return v if v is None else check(PROFILE_NAME_RE, v, "parent profile", "a profile name")

    @field_validator("launcher_env")
    @classmethod
    def _launcher_env_names(cls, v: dict[str, str | None]) -> dict[str, str | None]:
        return check_all(ENV_NAME_RE, v, "environment variable name", ENV_NAME_RULE)

    @model_validator(mode="after")
    def _what_the_launcher_reads(self) -> "Profile":
        launcher = registry.find(self.launcher.kind)
        if launcher is None:
            return self
        if self.model.repo_id is not None and not launcher.serves_repo_id:
            raise ValueError(f"model.repo_id: the {launcher.name} launcher reads the weights from "
                             f"{launcher.model_option}, not a Hugging Face repo id; use weights_dir + mount")
        if self.launcher_env and not launcher.edit_option:
            raise ValueError(f"launcher_env only applies to a launcher that edits its config "
                             f"(the {launcher.name} launcher does not); use container.environment")
        return self

    def launch_settings(self) -> LaunchSettings:
        """What the launcher turns into the server's argv: the model argument, served names,
        port, the engine settings the profile sets (:data:`ENGINE_FLAGS`, then speculative
        decoding: None = off, a dict of the keys to set; then the front-end settings), the
        extra arguments, and the launcher's config, GPU and environment overrides."""
        e = self.engine
        engine: dict[str, Any] = {n: getattr(e, n) for n in ENGINE_FLAGS if getattr(e, n) is not None}
        if e.speculative_state == "off":
            engine["speculative_config"] = None
        elif e.speculative_state == "set":
            assert e.speculative is not None
            engine["speculative_config"] = e.speculative.as_config()
        if e.enable_auto_tool_choice:
            engine["enable_auto_tool_choice"] = True
        for name in ("tool_call_parser", "reasoning_parser"):
            if getattr(e, name):
                engine[name] = getattr(e, name)
        return LaunchSettings(model=self.model.argument, served_model_name=tuple(self.model.served_model_name),
                              port=self.container.port, engine=engine, extra_args=tuple(e.extra_args),
                              config=self.launcher.config, gpu=self.launcher.gpu, env=dict(self.launcher_env))

    def server_command(self, catalog: Catalog | None = None, *, facts: ImageFacts | None = None) -> list[str]:
        """The container ``command`` (argv items) the profile's launcher builds from
        :meth:`launch_settings` on its image: with the launcher config shipped in the image that
        ``launcher.config`` names (none without facts).

        Args:
            catalog: the image catalog: the image's facts are the catalog's, else inferred from
                its name (:func:`servedeck.model.catalog.image_facts`), and a bool flag set false
                is spelled as the image's vLLM argument table spells it (the spelling differs
                between releases; the table is chosen as the check chooses it,
                :func:`servedeck.vllm.facts.table_for`: the image's own extracted facts, else the
                shipped table of its release); without one, or when no table fits, argparse's
                ``--no-x``.
            facts: the image's facts when the caller has them (read from the pulled image): in
                place of the catalog's.

        Raises:
            ServedeckError: the image's extracted facts file cannot be read.
        """
        settings = self.launch_settings()
        if facts is None and catalog is not None:
            facts = image_facts(catalog, self.image_ref)
        table = self._flag_table(facts, catalog) if catalog is not None else None
        launcher = self.launcher.runs
        defaults = launcher.defaults(facts.launcher_defaults, self.launcher.config) if facts else None
        return launcher.build_argv(settings, defaults, table)

    def _flag_table(self, facts: ImageFacts | None, catalog: Catalog) -> Any:
        """The image's vLLM argument table (:class:`servedeck.vllm.facts.VllmFacts`) when the
        command needs one (a bool flag set false), else None (also when nothing fits)."""
        if self.engine.enable_prefix_caching is not False:
            return None
        from servedeck.vllm.facts import image_vllm_facts, table_for
        choice = table_for(facts.vllm_version if facts else None, "serve_args",
                           image_vllm_facts(catalog, self.image_ref.digest))
        return choice.facts if choice else None

    @property
    def image_ref(self) -> ImageRef:
        """The image reference parsed (pinned: its ``digest`` is set)."""
        return ImageRef.parse(self.image)


# --------------------------------------------------------------------------- loading


@dataclass
class LoadedProfile:
    """A profile resolved from its file chain.

    Attributes:
        profile: the validated :class:`Profile`.
        chain: files from the profile itself up to the root parent.
        merged: the merged raw mapping that was validated.
        parent: the parent's :class:`LoadedProfile`, if ``extends`` is set.
    """

    profile: Profile
    chain: list[Path]
    merged: dict[str, Any]
    parent: "LoadedProfile | None" = None
    origin: dict[tuple[str, ...], Path] = field(default_factory=dict)


def _read_yaml(path: Path) -> dict[str, Any]:
    data = read_yaml_file(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ServedeckError("a profile must be a YAML mapping", file=str(path))
    return data


def deep_merge(base: dict[str, Any], child: dict[str, Any], _path: tuple[str, ...] = ()
               ) -> dict[str, Any]:
    """Merge ``child`` over ``base``: mappings merge recursively, lists and scalars replace,
    ``None`` deletes the key (except at :data:`NULL_IS_VALUE` paths, where it is kept).

    Returns a new dict; inputs are not modified.
    """
    out = dict(base)
    for key, value in child.items():
        path = _path + (key,)
        if value is None and path not in NULL_IS_VALUE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value, path)
        else:
            out[key] = value
    return out


def _origins(raw: dict[str, Any], file: Path, prefix: tuple[str, ...] = ()
             ) -> dict[tuple[str, ...], Path]:
    out: dict[tuple[str, ...], Path] = {}
    for k, v in raw.items():
        out[prefix + (k,)] = file
        if isinstance(v, dict):
            out.update(_origins(v, file, prefix + (k,)))
    return out


def _model_for(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    info = model.model_fields.get(key)
    if info is None:
        return None
    ann = info.annotation
    for cand in getattr(ann, "__args__", ()) or (ann,):
        if isinstance(cand, type) and issubclass(cand, BaseModel):
            return cand
    return None


def _check_keys(raw: dict[str, Any], model: type[BaseModel], file: Path,
                prefix: tuple[str, ...] = ()) -> list[ServedeckError]:
    """Every unknown key (with "did you mean"), found before merging so the file is named;
    empty when all keys are known."""
    problems: list[ServedeckError] = []
    for key, value in raw.items():
        if key not in model.model_fields:
            close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
            # search one level down too: a key put in the wrong section
            elsewhere = [f"{name}.{key}" for name, info in model.model_fields.items()
                         if (sub := _model_for(model, name)) and key in sub.model_fields]
            hint = (f"did you mean {'.'.join(prefix + (close[0],))}?" if close
                    else f"did you mean {elsewhere[0]}?" if elsewhere
                    else f"known keys here: {', '.join(model.model_fields)}")
            problems.append(ServedeckError(f"unknown key {key!r} (value {value!r})", file=str(file),
                                           field=".".join(prefix + (key,)), hint=hint,
                                           rule="profile/unknown-key"))
            continue
        sub = _model_for(model, key)
        if sub is not None and isinstance(value, dict):
            problems += _check_keys(value, sub, file, prefix + (key,))
    return problems


class ProfileStore:
    """Profiles in a directory (``profiles/*.yaml``).

    A store loads each profile once: a parent shared by many variants (``check --all``) is
    read and validated once per store. Make a new store to see files changed since.

    Args:
        directory: the profiles directory.
        local: locally built images that resolve placeholder digests (default: the
            ``.servedeck/`` of the project holding ``directory``; :mod:`servedeck.model.local_images`).
    """

    def __init__(self, directory: str | Path, local: LocalImages | None = None) -> None:
        self.directory = Path(directory)
        self._loaded: dict[str, LoadedProfile] = {}
        self.local = local if local is not None else LocalImages(self.directory.parent)

    def names(self) -> list[str]:
        """All profile names (file stems), sorted."""
        return sorted(p.stem for p in self.directory.glob("*.yaml"))

    def path(self, name: str) -> Path:
        """The file of profile ``name``.

        Raises:
            ServedeckError: ``name`` is not a profile name (:data:`NAME_RE`: checked before any
                file is opened, so ``../x`` never reaches outside the directory), or there is no
                such profile (with the closest names).
        """
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ServedeckError(f"{name!r} is not a profile name: lower-case letters, digits, '.', "
                                 "'_' and '-', starting with a letter or digit", file=str(self.directory),
                                 hint=f"profiles here: {', '.join(self.names()) or '(none)'}")
        p = self.directory / f"{name}.yaml"
        if not p.exists():
            close = difflib.get_close_matches(name, self.names(), n=3)
            hint = (f"did you mean {', '.join(close)}?" if close
                    else f"profiles here: {', '.join(self.names()) or '(none)'}")
            raise ServedeckError(f"no profile named {name!r}", file=str(p), hint=hint)
        return p

    def load(self, name: str) -> LoadedProfile:
        """Load, merge (``extends:``) and validate profile ``name``.

        Raises:
            ServedeckError: missing file, YAML error, unknown key, wrong type, an image
                without a digest, or a cycle in ``extends`` — naming the file, the field
                path, the bad value and a hint.
        """
        return self._load(name, ())

    def _load(self, name: str, seen: tuple[str, ...]) -> LoadedProfile:
        if name in self._loaded:
            return self._loaded[name]
        if name in seen:
            cycle = " -> ".join(seen + (name,))
            raise ServedeckError(f"cycle in extends: {cycle}", file=str(self.path(seen[-1])),
                                 field="extends", hint="remove one of the extends links")
        path = self.path(name)
        raw = _read_yaml(path)
        if "name" in raw and raw["name"] != name:
            raise ServedeckError(f"name {raw['name']!r} differs from the file name",
                                 file=str(path), field="name",
                                 hint=f"rename the file or drop the name key (it defaults to {name!r})")
        unknown = _check_keys(raw, Profile, path)
        parent: LoadedProfile | None = None
        merged: dict[str, Any]
        origin: dict[tuple[str, ...], Path]
        if raw.get("extends"):
            parent_name = raw["extends"]
            if not isinstance(parent_name, str):
                raise ServedeckError(f"extends must be a profile name, got {parent_name!r}",
                                     file=str(path), field="extends")
            try:
                parent = self._load(parent_name, seen + (name,))
            except ServedeckError as exc:
                if exc.field is None and ("no profile named" in exc.message
                                          or "is not a profile name" in exc.message):
                    raise ServedeckError(exc.message, file=str(path), field="extends",
                                         hint=exc.hint) from None
                raise
            base = {k: v for k, v in parent.merged.items() if k not in ("description",)}
            merged = deep_merge(base, raw)
            origin = {**parent.origin, **_origins(raw, path)}
            chain = [path, *parent.chain]
        else:
            merged = dict(raw)
            origin = _origins(raw, path)
            chain = [path]
        merged["name"] = name
        merged.setdefault("extends", None)
        merged["extends"] = raw.get("extends")
        if isinstance(merged.get("image"), str) and (built := self.local.resolve(merged["image"])):
            merged["image"] = built
        try:
            profile = Profile.model_validate(merged)
        except ValidationError as exc:
            raise ServedeckError.several(unknown + _validation_errors(exc, merged, origin, path, unknown)) from None
        if unknown:
            raise ServedeckError.several(unknown)
        loaded = LoadedProfile(profile=profile, chain=chain, merged=merged, parent=parent,
                             origin=origin)
        self._loaded[name] = loaded
        return loaded


def _validation_errors(exc: ValidationError, merged: dict[str, Any], origin: dict[tuple[str, ...], Path],
                       path: Path, reported: Sequence[ServedeckError] = ()) -> list[ServedeckError]:
    """One error per bad field of ``exc``: pydantic's errors of the branches of a union at one
    field (``int`` or ``"auto"``) are folded into the first one; unknown keys already in
    ``reported`` are not repeated."""
    out: list[ServedeckError] = []
    seen = {p.field for p in reported}
    for err in exc.errors():
        problem = _validation_error(err, merged, origin, path)
        if problem.field in seen:
            continue
        seen.add(problem.field)
        out.append(problem)
    return out


def _validation_error(err: Any, merged: dict[str, Any],
                      origin: dict[tuple[str, ...], Path], path: Path) -> ServedeckError:
    loc = tuple(str(p) for p in err["loc"])
    # pydantic may add a union-member tag to the location; keep the user's path
    user_loc = tuple(p for p in loc if not p[0].isupper() and not p.startswith("function-"))
    file = path
    for n in range(len(user_loc), 0, -1):
        if user_loc[:n] in origin:
            file = origin[user_loc[:n]]
            break
    value: Any = merged
    for part in user_loc:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            value = None
            break
    msg = err["msg"].removeprefix("Value error, ")
    field_path = ".".join(user_loc) or None
    hint = None
    if err["type"] == "string_type" and isinstance(value, (int, float, bool)):
        hint = f"quote it: \"{value}\" (YAML reads {value!r} as {type(value).__name__})"
    elif err["type"] == "missing":
        hint = "add it here or in a parent profile"
    text = f"{msg} (value: {value!r})" if value is not None and err["type"] != "missing" else msg
    return ServedeckError(text, file=str(file), field=field_path, hint=hint, rule="profile/invalid")


# --------------------------------------------------------------------------- diffs

IDENTITY_FIELDS = {"name", "description", "extends"}


def profile_view(profile: Profile) -> dict[str, Any]:
    """The comparable content of a profile: dotted paths → values, identity fields removed,
    ``engine.speculative`` shown as ``"off"`` when explicitly off."""
    data = profile.model_dump(mode="json", exclude_unset=False)
    for key in IDENTITY_FIELDS:
        data.pop(key, None)
    if profile.engine.speculative_state == "off":
        data["engine"]["speculative"] = "off"
    flat = flatten(data)
    return {k: v for k, v in flat.items() if v is not None and v != [] and v != {}}


@dataclass(frozen=True)
class Change:
    """One field that differs between two profiles.

    Attributes:
        path: dotted field path (``engine.max_num_batched_tokens``).
        old: value in the parent/baseline (None = unset, i.e. image default).
        new: value in the variant.
    """

    path: str
    old: Any
    new: Any

    def render(self) -> str:
        """``engine.max_num_batched_tokens: 4096 -> 8192``."""
        def show(v: Any) -> str:
            return "(image default)" if v is None else repr(v) if isinstance(v, str) else str(v)
        return f"{self.path}: {show(self.old)} -> {show(self.new)}"


def diff_profiles(old: Profile, new: Profile) -> list[Change]:
    """Fields that differ between ``old`` and ``new`` (identity fields ignored), sorted by path."""
    a, b = profile_view(old), profile_view(new)
    changed = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    # a subtree that changed shape (e.g. speculative settings -> "off") is one change
    roots = [p for p in changed if not any(p.startswith(q + ".") for q in changed if q != p)]
    out = []
    for root in roots:
        if root in a and root in b or not any(p.startswith(root + ".") for p in changed):
            out.append(Change(root, a.get(root), b.get(root)))
        else:
            out.append(Change(root, _subtree(a, root), _subtree(b, root)))
    return out


def _subtree(view: dict[str, Any], root: str) -> Any:
    if root in view:
        return view[root]
    sub = {p[len(root) + 1:]: v for p, v in view.items() if p.startswith(root + ".")}
    return sub or None
