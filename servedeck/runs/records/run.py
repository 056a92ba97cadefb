"""``run.json``: what one run is and how it ended."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from servedeck import __version__
from servedeck.runs.records.base import Record

__all__ = ["Outcome", "FailurePhase", "RecordedImage", "RollbackResult", "ArgsVerificationSummary", "RunMeta"]


Outcome = Literal["started", "ready", "failed", "rolled-back", "interrupted", "abandoned"]
"""``started`` while the deploy runs; every ending writes one of the others. ``abandoned``: the
deploying client died (found by a later deploy, rollback or status of the same host)."""

FailurePhase = Literal["render", "check", "preflight", "lock", "pull", "upload", "start",
                       "readiness", "timeout", "crash", "interrupt", "rollback", "internal"]


class RecordedImage(Record):
    """The image a run deployed."""

    reference: str | None = Field(None, description="the digest-pinned reference as deployed (None for a "
                                                    "rollback run: the host history keeps the digest only)")
    digest: str | None = Field(None, description="`sha256:…` of the reference")


class RollbackResult(Record):
    """What the automatic rollback after a failed deploy achieved."""

    revision: int | None = Field(None, description="the host history revision restored (a known-good one)")
    ready: bool = Field(description="the previous deployment serves again")
    reason: str | None = Field(None, description="why it did not, when it did not")


class ArgsVerificationSummary(Record):
    """Summary of ``args_verification.json``."""

    confirmed: list[str] = Field(default_factory=list, description="settings the server confirmed")
    differs: list[str] = Field(default_factory=list, description="`setting: differs (expected X, got Y)`")


class RunMeta(Record):
    """``run.json``: what one run is. Written by ``RunRecord.save_meta`` only.

    Every field is optional except the identity fields set by ``create_run``; fields are filled
    in as the deploy proceeds (``compose_sha256`` after the pull, ``ready_at`` when it serves,
    ``benched_at`` after a benchmark). Fields that were never set are left out of the file.
    """

    run_id: str = Field(description="the directory name, `<sequence>-<profile>-<host>`")
    sequence: int = Field(description="counter over the runs directory, from 1")
    kind: Literal["deploy", "rollback"] = Field(
        "deploy", description="`rollback`: the run restores an earlier deployment (`restores`)")
    profile: str = Field(description="profile name")
    parent_profile: str | None = Field(None, description="the profile's `extends`")
    host: str = Field(description="inventory host name")
    started_at: str = Field(description="UTC, ISO 8601 with `Z`")
    ready_at: str | None = Field(None, description="when the server answered /health and /v1/models")
    ended_at: str | None = Field(None, description="when a run that did not become ready ended")
    outcome: Outcome = Field("started", description="how the run ended; `started` while the deploy runs")
    failure: str | None = Field(None, description="why the run did not become ready (one sentence)")
    failure_phase: FailurePhase | None = Field(
        None, description="the deploy phase that failed")
    rollback: RollbackResult | None = Field(None, description="the automatic rollback after a failure")
    restores: str | None = Field(None, description="rollback runs: the run id whose deployment was restored "
                                                   "(None when the restored compose file matches no recorded run)")
    rollback_to: int | None = Field(None, description="rollback runs: the host history revision restored")
    revision: int | None = Field(None, description="this deployment's revision in the host's history")
    diagnosis: str | None = Field(
        None, description="readiness diagnosis of a failure: `unreachable` (host), `gone`, `exited`, "
                          "`restarting`, `not-ready`, `api-key` (the server wants a key)")
    wait_s: float | None = Field(None, description="seconds the readiness wait took")
    host_state_written: bool | None = Field(
        None, description="False when the final history line could not be written on the host "
                          "(the next command of that host completes it)")
    power: dict[str, Any] | None = Field(
        None, description="the card power limit this deploy set: `{\"interface\", \"device\", "
                          "\"previous_w\", \"new_w\", ...}` (servedeck.host.power)")
    power_restored: dict[str, Any] | None = Field(
        None, description="the limit put back by a rollback of this run (same shape as `power`)")
    redacted: list[str] = Field(default_factory=list,
                                description="names of the secrets replaced by `***` in this record's files")
    servedeck_version: str = Field(__version__, description="servedeck that wrote the record")
    profiles_git_commit: str | None = Field(
        None, description="git commit of profiles/ (`+dirty` when it had uncommitted changes)")
    compose_sha256: str | None = Field(None, description="sha256 of the compose bytes deployed")
    compose_redacted: bool | None = Field(None, description="the stored compose file had a secret removed")
    image: RecordedImage | None = Field(None, description="`{\"reference\", \"digest\"}`")
    image_override: str | None = Field(None, description="`--image` given at deploy (replaces the profile's)")
    image_source: str | None = Field(
        None, description="where the image reference came from when not the profile file "
                          "(`local-images` for a locally built image alias)")
    served_model_name: str | None = Field(None, description="the name requests use")
    port: int | None = Field(None, description="published API port on the host")
    timings_s: dict[str, float | None] = Field(
        default_factory=dict,
        description="seconds: `pull_s`, `container_start_to_ready_s`, `up_to_ready_s`, "
                    "`deploy_total_s`, `overhead_s`")
    args_verification: ArgsVerificationSummary | None = Field(None, description="summary of args_verification.json")
    benched_at: str | None = Field(None, description="when `invoke bench` finished (the run holds bench.jsonl)")
    load_benched_at: str | None = Field(None, description="when `invoke bench --load/--capacity` finished "
                                                          "(the run holds load.json)")
    experiment: str | None = Field(None, description="interleaved A/B: the experiment id this run belongs to")

    @property
    def served(self) -> bool:
        """True when the run's server became ready."""
        return self.outcome == "ready"
