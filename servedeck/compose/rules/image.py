"""``image/*``: a service's image reference: pinned by digest, a well-formed digest, a tag beside
the digest, a digest the image catalog knows (else facts inferred from the repository and tag,
said so), the catalog's repository for it, and the all-zero placeholder digest of an image this
machine has not built (:mod:`servedeck.model.local_images`: a deploy would fail with ``manifest
unknown``; the finding names the command that builds and records it).
"""

from __future__ import annotations

from servedeck.compose.rules._context import Ctx, Service
from servedeck.model.local_images import LOCAL_DIR, LOCAL_IMAGES, PLACEHOLDER_DIGEST


def _norm_repo(repo: str) -> str:
    r = repo.lower()
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if r.startswith(prefix):
            r = r[len(prefix):]
    if r.startswith("library/"):
        r = r[len("library/"):]
    return r


def check_image(ctx: Ctx, svc: Service) -> None:
    """``image/*``: digest pinning and catalog knowledge."""
    path = svc.path + ("image",)
    img = svc.image
    if img is None:
        return
    if "$" in img.text:
        ctx.warning("image/interpolated", path,
                    f"image {img.text!r} is interpolated; its pinning cannot be verified from the file",
                    "write the digest literally: repository@sha256:<digest>")
        return
    if img.digest is None:
        ctx.error("image/not-pinned", path,
                  f"image {img.text!r} is not pinned by digest; the tag can move, so two runs may use "
                  f"different images", "pin it: repository@sha256:<digest> "
                  "(`docker buildx imagetools inspect REF` shows the digest)")
        return
    problem = img.digest_problem()
    if problem:
        ctx.error("image/bad-digest", path, f"image digest {img.digest!r} is malformed: {problem}",
                  "copy the full digest, e.g. sha256:21412bdd...(64 hex digits)")
        return
    if img.tag:
        ctx.info("image/tag-and-digest", path,
                 f"image has both tag {img.tag!r} and a digest; Docker pulls by digest and ignores the "
                 f"tag, which may no longer point at this digest", "drop the tag to avoid confusion")
    if svc.facts is None or svc.facts.inferred:
        where = "the image catalog" if ctx.catalog is not None else "any catalog (none given)"
        if svc.facts is None:
            what = ("nothing in its repository name says which server it runs: device, entrypoint "
                    "and vLLM version-specific checks are skipped and launcher defaults are unknown")
        else:
            f = svc.facts
            known = f"vLLM {f.vllm_version}" if f.vllm_version != "unknown" else "vLLM version unknown"
            what = (f"facts are inferred from the repository and tag, not read from the image: "
                    f"{f.launcher} launcher ({' '.join(f.entrypoint)}), {f.device} device, {known}; "
                    f"device, entrypoint and version rules run on these")
        ctx.info("image/unknown-digest", path, f"digest {img.digest} is not in {where}; {what}",
                 "`invoke image-facts IMAGE` (or `invoke deploy`) records the image's own facts")
        if svc.facts is None:
            return
    if _norm_repo(svc.facts.repository) != _norm_repo(img.repository):
        ctx.warning("image/repository-mismatch", path,
                    f"the catalog records digest {img.digest[:19]}... for {svc.facts.repository}, "
                    f"not {img.repository}", "check the repository name")


def check_placeholder_digest(ctx: Ctx, svc: Service) -> None:
    """``image/placeholder-digest`` (warning: a fresh clone must still pass `check --all` and its
    pre-commit hook; the deploy shows it before the pull that would fail)."""
    img = svc.image
    if img is None or img.digest != PLACEHOLDER_DIGEST:
        return
    from servedeck.model.project import is_source_checkout
    if is_source_checkout():  # the development task exists in a checkout's `invoke` only
        hint = (f"build it here: `invoke image-build` (records the pushed digest in {LOCAL_DIR}/{LOCAL_IMAGES}, "
                "untracked; the profile then loads with it), or pin the digest of a pushed image")
    else:
        hint = ("pin the digest of an image you built and pushed (`docker push` prints it): "
                f"image: {img.repository}@sha256:<digest>")
    ctx.warning("image/placeholder-digest", svc.path + ("image",),
              f"image {img.repository}@{PLACEHOLDER_DIGEST[:15]}… is a placeholder, not a built image: "
              f"a deploy would fail with 'manifest unknown'", hint)
