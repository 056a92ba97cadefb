"""``facts.json``: host and image facts gathered during the preflight, and the fields of them an
A/B comparison compares (:func:`compared_paths`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, RootModel

from servedeck.runs.records.base import Record

__all__ = ["compared", "GpuDevice", "HostFactsRecord", "ImageFactsRecord", "FactsRecord", "compared_paths"]


def compared(name: str) -> dict[str, Any]:
    """``json_schema_extra`` of a field that the A/B comparison compares under ``name``."""
    return {"compared": name}


class GpuDevice(Record):
    """A GPU device node on the host."""

    path: str = Field(description="`/dev/dri/renderD128`")
    gid: int | str | None = Field(None, description="its group id")


class HostFactsRecord(Record):
    """The host as the preflight found it."""

    name: str | None = Field(None, description="inventory host name", json_schema_extra=compared("host.name"))
    hostname: str | None = Field(None, description="the host's own name (`hostname`)")
    kernel: str | None = Field(None, description="`uname -r`", json_schema_extra=compared("host.kernel"))
    docker_version: str | None = Field(None, description="Docker Engine version",
                                       json_schema_extra=compared("host.docker_version"))
    compose_version: str | None = Field(None, description="Docker Compose version",
                                        json_schema_extra=compared("host.compose_version"))
    gpu_devices: list[GpuDevice] = Field(default_factory=list, description="`/dev/dri` nodes")
    gpu_power_cap_w: float | None = Field(
        None, description="the xe card's sustained limit `power1_max` in W, as preflight found it: before "
                          "this deploy's own cap", json_schema_extra=compared("host.gpu_power_cap_w"))
    disk_free_gib: float | None = Field(None, description="free space under the host's workdir")


class ImageFactsRecord(Record):
    """The image as the host has it."""

    reference: str | None = Field(None, description="the digest-pinned reference")
    digest: str | None = Field(None, description="`sha256:…`", json_schema_extra=compared("image"))
    created: str | None = Field(None, description="the image's creation time")
    entrypoint: list[str] = Field(default_factory=list, description="the image's entrypoint")
    vllm_version: str | None = Field(None, description="vLLM in the image",
                                     json_schema_extra=compared("vllm_version"))
    labels: dict[str, str] = Field(default_factory=dict, description="the image's labels")


class FactsRecord(Record):
    """``facts.json``: host and image facts gathered during the preflight. Fields marked
    *compared* are what an A/B comparison sees of them (``servedeck.ab.compare``)."""

    host: HostFactsRecord = Field(default_factory=HostFactsRecord, description="the host")
    image: ImageFactsRecord = Field(default_factory=ImageFactsRecord, description="the image")


def compared_paths(model: type[BaseModel] = FactsRecord, prefix: tuple[str, ...] = ()
                   ) -> dict[tuple[str, ...], str]:
    """``{field path: comparison name}`` of the fields marked :func:`compared` in ``model`` and
    the models of its fields (``{("host", "kernel"): "host.kernel", ("image", "digest"):
    "image", ...}`` for :class:`FactsRecord`)."""
    out: dict[tuple[str, ...], str] = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if "compared" in extra:
            out[(*prefix, name)] = str(extra["compared"])
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and not issubclass(sub, RootModel):
            out.update(compared_paths(sub, (*prefix, name)))
    return out
