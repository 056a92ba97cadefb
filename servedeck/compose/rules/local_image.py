"""Rule ``image/placeholder-digest``: a profile pins the all-zero placeholder digest of an
image this machine has not built (see :mod:`servedeck.model.local_images`). Docker would fail
at deploy with ``manifest unknown``; the finding names the command that builds and records it.
"""

from __future__ import annotations

from servedeck.compose.rules._service import Ctx, Service
from servedeck.model.local_images import LOCAL_DIR, LOCAL_IMAGES, PLACEHOLDER_DIGEST


def check_placeholder_digest(ctx: Ctx, svc: Service) -> None:
    """``image/placeholder-digest`` (warning: a fresh clone must still pass `check --all` and its
    pre-commit hook; the deploy shows it before the pull that would fail)."""
    img = svc.image
    if img is None or img.digest != PLACEHOLDER_DIGEST:
        return
    ctx.warning("image/placeholder-digest", svc.path + ("image",),
              f"image {img.repository}@{PLACEHOLDER_DIGEST[:15]}… is a placeholder, not a built image: "
              f"a deploy would fail with 'manifest unknown'",
              f"build it here: `invoke image-build` (records the pushed digest in {LOCAL_DIR}/{LOCAL_IMAGES}, "
              "untracked; the profile then loads with it), or pin the digest of a pushed image")
