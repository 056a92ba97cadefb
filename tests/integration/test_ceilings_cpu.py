"""The ceiling measurement (``servedeck.host.ceilings``) in the real CPU vLLM image, over SSH to
the loopback card host: a CPU's matrix ceiling is the better of its bfloat16 and float32 matmul
rates (a CPU without bfloat16 arithmetic runs a bfloat16 GEMM through float32), both are kept,
and the roofline takes the winner as the prefill ceiling."""

from __future__ import annotations

import uuid

import pytest

from devtools import imagebuild
from servedeck.bench.roofline import resolve_ceilings
from servedeck.host.ceilings import measure_ceilings
from servedeck.runs.records import MeasuredCeilings

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def cpu_ref() -> str:
    return imagebuild.build_cpu_vllm_image(progress=False)


def test_a_cpu_measures_both_matmul_dtypes_and_its_ceiling_is_the_better(scratch_host, cpu_ref):
    name = f"sd-ceilings-{uuid.uuid4().hex[:8]}"
    scratch_host.run(["docker", "run", "-d", "--rm", "--name", name, "--network", "none",
                      "--entrypoint", "sleep", cpu_ref, "300"])
    try:
        doc = measure_ceilings(scratch_host, name, buffer_mib=32, repeats=2, matmul_n=256)
    finally:
        scratch_host.run(["docker", "rm", "-f", name], check=False)
    assert doc["device"] == "cpu" and "error" not in doc, doc
    rates = doc["matrix_tflops_by_dtype"]
    assert set(rates) == {"bfloat16", "float32"} and all(r > 0 for r in rates.values()), rates
    best = max(rates, key=rates.get)
    assert doc["matrix_dtype"] == best and doc["matrix_tflops"] == rates[best]
    kept = MeasuredCeilings(**doc, host="scratch", measured_at="2026-12-04T00:00:00Z")
    assert kept.matrix_tflops_by_dtype == rates
    ceilings = resolve_ceilings(host="scratch", device="cpu", measured=kept.model_dump())
    assert ceilings.matrix_tflops == rates[best]
    assert f"({best} matmul)" in (ceilings.matrix_source or "")
