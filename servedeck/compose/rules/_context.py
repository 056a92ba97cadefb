"""The check's context shared by the rule families: the checked document, what the caller
knows about it (:class:`CheckExpectations`), the findings list; and the services of the document
(:class:`servedeck.compose.service.Service`, the one model of a service as it will run, read
once per check, or by the renderer from the file it wrote).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servedeck.compose.rules._doc import Doc, Path, path_str
from servedeck.compose.service import Service, read_services
from servedeck.findings import Finding, Severity
from servedeck.launchers.base import Flag, Token
from servedeck.model.catalog import Catalog


class CheckExpectations(BaseModel):
    """What the caller knows about the file beyond its text.

    Attributes:
        render_gid: the card host's ``render`` group id (from the host inventory), e.g. ``"992"``.
        rendered: True when the file was produced by servedeck's renderer (relative bind
            mounts then resolve against the run's working directory on the host).
        startup_seconds: measured time to ready (s) of the last run of this profile, if any.
        hf_config: the served model's Hugging Face ``config.json`` (as a dict), if known.
        gpu_memory_gib: memory of one GPU of the card host (GiB), if known.
        variables: the variables Compose substitutes (``${VAR}``) when it reads the file, as far
            as the file's own directory says: its ``.env``
            (:func:`servedeck.compose.document.dotenv_variables`). The service rules judge the
            values Compose would give (defaults of ``${VAR:-default}`` included); a value that
            needs the shell of whoever runs Compose is judged as written.
        env_files: the ``env_file`` files the services name, path as written → their variables
            (None: not readable), as :func:`servedeck.compose.document.env_file_variables`
            reads them beside the file; a file not listed here is not judged.
        extends_files: other compose documents that services ``extends`` (``file:``), by the
            path as written, parsed, or :class:`~servedeck.compose.document.Unreadable` when
            the file cannot be read or parsed (:func:`servedeck.compose.document.extends_files`
            reads them beside the file); a base in a file not given here is not merged.
    """

    model_config = ConfigDict(extra="forbid")

    render_gid: str | None = None
    rendered: bool = False
    startup_seconds: float | None = None
    hf_config: dict[str, Any] | None = None
    gpu_memory_gib: float | None = None
    variables: dict[str, str] = Field(default_factory=dict)
    env_files: dict[str, dict[str, str] | None] = Field(default_factory=dict)
    extends_files: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Ctx:
    """Everything a rule needs, and the list it appends findings to."""

    doc: Doc
    file: str | None
    catalog: Catalog | None
    expect: CheckExpectations
    findings: list[Finding] = field(default_factory=list)
    memo: dict[Any, Any] = field(default_factory=dict)  # per-check lookups shared by rules

    def add(self, severity: Severity, rule: str, path: Path, message: str, hint: str | None = None,
            line: int | None = None, key: bool = False) -> None:
        """Append one finding; the line defaults to the node (or key) line of ``path``."""
        if line is None:
            line = self.doc.key_line(path) if key else self.doc.line(path)
        self.findings.append(Finding(severity=severity, rule=rule, path=path_str(path), message=message,
                                     hint=hint, line=line, file=self.file))

    def error(self, rule: str, path: Path, message: str, hint: str | None = None, **kw: Any) -> None:
        self.add(Severity.error, rule, path, message, hint, **kw)

    def warning(self, rule: str, path: Path, message: str, hint: str | None = None, **kw: Any) -> None:
        self.add(Severity.warning, rule, path, message, hint, **kw)

    def info(self, rule: str, path: Path, message: str, hint: str | None = None, **kw: Any) -> None:
        self.add(Severity.info, rule, path, message, hint, **kw)


def services(ctx: Ctx) -> list[Service]:
    """The services of the document (:func:`servedeck.compose.service.read_services`), each as
    Compose reads it with what ``ctx.expect`` knows."""
    return read_services(ctx.doc.data, catalog=ctx.catalog, variables=ctx.expect.variables,
                         env_files=ctx.expect.env_files, extends_files=ctx.expect.extends_files)


__all__ = ["CheckExpectations", "Ctx", "Service", "Flag", "Token", "services", "path_str"]
