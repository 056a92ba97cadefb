"""Locally built images: untracked project state, so that building an image never edits a
tracked file.

A profile in the repository may pin the **placeholder** digest ``sha256:000…0`` (64 zeros) for
an image that each machine builds itself (the CPU vLLM image of ``invoke demo``). ``invoke
image-build`` records what it pushed in ``.servedeck/local-images.yaml`` (untracked, listed in
``.gitignore``)::

    images:
      127.0.0.1:5000/servedeck/vllm-cpu: 127.0.0.1:5000/servedeck/vllm-cpu@sha256:dee1…

and a profile whose image is the placeholder of a listed repository loads as that reference
(:func:`servedeck.model.profile.ProfileStore.load`). The image facts of those digests go to
``.servedeck/images.yaml`` instead of the tracked ``deploy/images.yaml``
(:class:`servedeck.model.catalog.Catalog`). A real digest in a profile is never replaced; a
placeholder that nothing resolves is a check finding (rule ``image-placeholder-digest``) that
names the command to run.
"""

from __future__ import annotations

import io
from pathlib import Path

from servedeck.errors import ServedeckError
from servedeck.fsutil import atomic_write, read_bounded
from servedeck.yamlio import LIMITS, YAMLError, dump_data, file_error, load_data

LOCAL_DIR = ".servedeck"
LOCAL_IMAGES = "local-images.yaml"
LOCAL_CATALOG = "images.yaml"
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


def split_reference(image: str) -> tuple[str, str | None]:
    """``repo[:tag]@sha256:…`` → ``(repo[:tag], digest)``; ``(image, None)`` without a digest."""
    repo, sep, digest = str(image).partition("@")
    return repo, digest if sep else None


def is_placeholder(image: str | None) -> bool:
    """True when ``image`` pins the all-zero placeholder digest."""
    return image is not None and split_reference(image)[1] == PLACEHOLDER_DIGEST


class LocalImages:
    """The ``.servedeck/`` state of one project.

    Args:
        root: the project directory (the one holding ``profiles/``).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def path(self) -> Path:
        """``.servedeck/local-images.yaml``."""
        return self.root / LOCAL_DIR / LOCAL_IMAGES

    @property
    def catalog_path(self) -> Path:
        """``.servedeck/images.yaml``: image facts of locally built digests."""
        return self.root / LOCAL_DIR / LOCAL_CATALOG

    def load(self) -> dict[str, str]:
        """``{repository: digest-pinned reference}`` (empty when the file does not exist).

        Raises:
            ServedeckError: the file is not a mapping under ``images``.
        """
        try:
            text = read_bounded(self.path, LIMITS.max_bytes, what="YAML")
        except FileNotFoundError:
            return {}
        try:
            doc = load_data(text) or {}
        except YAMLError as exc:
            raise file_error(exc, self.path) from None
        images = doc.get("images") if isinstance(doc, dict) else None
        if not isinstance(images, dict) or not all(isinstance(v, str) for v in images.values()):
            raise ServedeckError("expected `images: {REPOSITORY: REPOSITORY@sha256:…}`", file=str(self.path),
                                 field="images", hint="delete the file and run `invoke image-build` again")
        return {str(k): v for k, v in images.items()}

    def record(self, reference: str) -> Path:
        """Record a locally built, digest-pinned ``reference`` for its repository (atomic write;
        creates ``.servedeck/`` with a ``.gitignore`` of its own so it stays untracked anywhere).

        Raises:
            ServedeckError: ``reference`` has no digest or is the placeholder.
        """
        repo, digest = split_reference(reference)
        if not digest or digest == PLACEHOLDER_DIGEST:
            raise ServedeckError(f"not a built image reference: {reference!r}",
                                 hint="record the repo@sha256:<digest> that `docker push` printed")
        images = {**self.load(), repo: reference}
        buf = io.StringIO()
        buf.write("# Locally built images (written by `invoke image-build`; not tracked).\n"
                  "# A profile pinning REPOSITORY@sha256:000…0 (the placeholder) loads as the reference here.\n")
        buf.write(dump_data({"images": images}))
        gitignore = self.root / LOCAL_DIR / ".gitignore"
        if not gitignore.exists():
            atomic_write(gitignore, "*\n")
        return atomic_write(self.path, buf.getvalue())

    def resolve(self, image: str | None) -> str | None:
        """The local reference for a placeholder ``image`` of a recorded repository, else None."""
        if image is None or not is_placeholder(image):
            return None
        return self.load().get(split_reference(image)[0])

    def owns(self, digest: str | None) -> bool:
        """True when ``digest`` is a recorded local build."""
        return bool(digest) and any(split_reference(ref)[1] == digest for ref in self.load().values())
