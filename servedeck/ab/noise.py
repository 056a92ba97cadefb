"""A/A noise floors: what two runs of the same configuration differ by on one host and image.

``invoke ab --aa A B`` compares two runs of one configuration and stores, per bench metric,
the noise (pooled standard deviation of log samples ≈ coefficient of variation), the A/A ratio
of medians and the smallest difference a test at the A/A's sample size could detect (80 %
power, the report's Holm level) in ``runs/noise/<host>-<image digest>.json``. Later A/B reports
of runs on the same host and image cite it beside their own verdicts.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from servedeck.ab.stats import POWER, Comparison
from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write
from servedeck.jsonio import read_json_file
from servedeck.numfmt import fmt_pct
from servedeck.runs import store


class MetricNoise(BaseModel):
    """One metric's noise floor.

    Attributes:
        noise: pooled standard deviation of the log samples (0.02 ≈ 2 % spread per request).
        aa_ratio: median(B) / median(A) of the two identical arms.
        n_a, n_b: samples per arm.
        detectable: smallest relative difference (0.05 = 5 %) detectable at min(n_a, n_b) per arm.
    """

    model_config = ConfigDict(extra="forbid")
    noise: float | None
    aa_ratio: float | None
    n_a: int
    n_b: int
    detectable: float | None


class NoiseFloor(BaseModel):
    """An A/A result: ``metrics`` keyed by ``phase metric`` (``warm decode_tok_s``)."""

    model_config = ConfigDict(extra="forbid")
    host: str
    image_digest: str
    runs: list[str]
    measured_at: str
    alpha: float
    metrics: dict[str, MetricNoise]


def _detectable(noise: float | None, n: int, level: float) -> float | None:
    from scipy.stats import norm
    if noise is None or n < 2:
        return None
    z = norm.ppf(1 - level / 2) + norm.ppf(POWER)
    return math.expm1(z * noise * math.sqrt(2 / n) / math.sqrt(3 / math.pi))


def noise_floor(comparison: Comparison, host: str, image_digest: str) -> NoiseFloor:
    """The noise floor of an A/A comparison (judged bench metrics only)."""
    judged = [m for m in comparison.bench if m.judged]
    level = comparison.alpha / max(1, len(judged))
    return NoiseFloor(
        host=host, image_digest=image_digest, runs=[*comparison.runs_a, *comparison.runs_b],
        measured_at=store.utcnow(), alpha=comparison.alpha,
        metrics={m.key: MetricNoise(noise=m.noise, aa_ratio=m.ratio, n_a=len(m.samples_a),
                                    n_b=len(m.samples_b),
                                    detectable=_detectable(m.noise, min(len(m.samples_a), len(m.samples_b)), level))
                 for m in judged})


def noise_path(runs_dir: Path, host: str, image_digest: str) -> Path:
    """``runs/noise/<host>-<first 12 hex digits of the digest>.json``."""
    hexpart = image_digest.split(":", 1)[-1][:12]
    return Path(runs_dir) / store.NOISE_DIR / f"{host}-{hexpart}.json"


def save_noise_floor(runs_dir: Path, floor: NoiseFloor) -> Path:
    """Write ``floor`` atomically (replacing an older A/A of the same host and image)."""
    return atomic_write(noise_path(runs_dir, floor.host, floor.image_digest),
                        floor.model_dump_json(indent=2) + "\n")


def load_noise_floor(runs_dir: Path, host: str | None, image_digest: str | None) -> NoiseFloor | None:
    """The stored noise floor of ``host`` and ``image_digest``, or None (none measured, or the
    file is unreadable: a noise floor is context, never a reason to fail a report)."""
    if not host or not image_digest:
        return None
    try:
        return NoiseFloor.model_validate(read_json_file(noise_path(runs_dir, host, image_digest)))
    except (OSError, ValueError, ValidationError, ServedeckError):
        return None


def noise_sentence(floor: NoiseFloor, comparison: Comparison) -> str:
    """``noise floor of host local on image sha256:55df90dd26e1 (A/A 0005 vs 0006, 2026-…):
    cold ttft_s ±2.1 % per request (detectable 5.0 % at n=5), …`` for the metrics of this report."""
    parts = []
    for m in comparison.bench:
        nf = floor.metrics.get(m.key)
        if nf is None:
            continue
        det = f", detectable {fmt_pct(nf.detectable)} at n={min(nf.n_a, nf.n_b)}" if nf.detectable else ""
        parts.append(f"{m.key} ±{fmt_pct(nf.noise)} per request{det}")
    digest = floor.image_digest.split(":", 1)[-1][:12]
    return (f"noise floor of host {floor.host} on image {digest} (A/A {' vs '.join(floor.runs)}, "
            f"{floor.measured_at}): " + ("; ".join(parts) or "no metric in common"))
