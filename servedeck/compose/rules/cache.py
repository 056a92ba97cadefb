"""``cache/*``: where huggingface_hub looks for the models a server names by repo id, against
the container's mounts.

huggingface_hub (``huggingface_hub/constants.py``) keeps downloads in ``HF_HUB_CACHE`` (the older
name ``HUGGINGFACE_HUB_CACHE`` still read), else ``$HF_HOME/hub``, else
``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` with ``~`` the process's
``HOME``: the image's (or the service's) ``HOME`` variable, else the home Docker gives the user
from the image's ``/etc/passwd`` (``/root`` for root; ``/`` for a uid without an entry). vLLM's
``--download-dir`` replaces the cache for the weights. With ``HF_HUB_OFFLINE=1`` (or
``TRANSFORMERS_OFFLINE=1``) nothing is downloaded: a repo id not in that cache fails at once
("couldn't find it in the cached files"); online, it is downloaded again into the container's
writable layer on every re-create (opea-project/GenAIExamples PR #1642).

The repo ids judged: the model argument, ``--tokenizer``, the speculative draft model.

- ``cache/hf-offline-not-mounted`` (error): offline, and no mount provides the cache.
- ``cache/hf-not-mounted``: online, and no mount provides the cache: a warning when a mount
  that looks like a Hugging Face cache is elsewhere (mounted, and not where it is looked for),
  else information (it works; each re-created container downloads the model again).
- ``cache/hf-home-unwritable`` (warning): a non-root uid whose ``HOME`` is ``/`` (no passwd
  entry) and no cache variable: huggingface_hub cannot create ``/.cache``.
"""

from __future__ import annotations

import posixpath
import re

from servedeck.compose.rules._doc import Path
from servedeck.compose.rules._facts import served_model, server_environment
from servedeck.compose.rules._context import Ctx, Service
from servedeck.compose.rules.paths import MountItem, mount_at, mounts

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TRUE = {"1", "true", "yes", "on"}
_CACHE_WORDS = re.compile(r"(?i)huggingface|hf[-_]?(?:cache|home|hub)|/hub\b|\.cache")


def _home(svc: Service, env: dict[str, str]) -> tuple[str | None, str]:
    """(the process's HOME, how it is known); None when it cannot be told (a named non-root
    user whose passwd entry is unknown)."""
    if env.get("HOME"):
        return env["HOME"], "HOME"
    user = svc.data.get("user")
    how = "the service's user"
    if user is None:
        user = svc.facts.user if svc.facts is not None and svc.facts.user is not None else ""
        how = "the image's user"
    name = str(user).split(":", 1)[0].strip()
    if name in ("", "root", "0"):
        return "/root", f"{how}, root"
    if name.isdigit():
        return "/", f"{how}, uid {name} (no passwd entry in a vLLM image: Docker sets HOME=/)"
    return None, how


def hub_cache(svc: Service, env: dict[str, str]) -> tuple[str | None, str]:
    """(the directory huggingface_hub keeps repos in, which setting decides it); None when the
    home directory cannot be told."""
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return env[key], key
    if env.get("HF_HOME"):
        return posixpath.join(env["HF_HOME"], "hub"), "HF_HOME"
    if env.get("XDG_CACHE_HOME"):
        return posixpath.join(env["XDG_CACHE_HOME"], "huggingface", "hub"), "XDG_CACHE_HOME"
    home, how = _home(svc, env)
    if home is None:
        return None, how
    return posixpath.join(home, ".cache", "huggingface", "hub"), f"the default under HOME={home} ({how})"


def repo_ids(svc: Service) -> list[tuple[str, str, Path]]:
    """(what, repo id, document path) of the Hugging Face repo ids the server loads."""
    out: list[tuple[str, str, Path]] = []
    model = served_model(svc)
    if isinstance(model, str) and _REPO_ID.match(model.strip()):
        at = svc.launch.model.index if svc.launch.model is not None else None
        path = svc.launch.tokens[at].path if at is not None and at < len(svc.launch.tokens) else svc.path + ("command",)
        out.append(("model", model.strip(), path))
    tok = svc.effective.get("tokenizer")
    if tok is not None and isinstance(tok.value, str) and _REPO_ID.match(tok.value.strip()):
        out.append(("tokenizer", tok.value.strip(), tok.path))
    spec = svc.effective.get("speculative_config")
    draft = spec.value.get("model") if spec is not None and isinstance(spec.value, dict) else None
    if spec is not None and isinstance(draft, str) and _REPO_ID.match(draft.strip()):
        out.append(("draft model", draft.strip(), spec.path))
    return out


def check_hf_cache(ctx: Ctx, svc: Service) -> None:
    """``cache/hf-offline-not-mounted``, ``cache/hf-not-mounted``, ``cache/hf-home-unwritable``."""
    if svc.launcher is None:
        return
    repos = repo_ids(svc)
    if not repos:
        return
    env = server_environment(svc)
    offline = [k for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if env.get(k, "").strip().lower() in _TRUE]
    cache, how = hub_cache(svc, env)
    download = svc.eff("download_dir")
    if isinstance(download, str) and download.startswith("/"):
        cache, how = download, "--download-dir"
    if cache is None:
        return
    ms = mounts(svc)
    what, repo, path = repos[0]
    if how.startswith("the default under HOME=/ ") and not offline:
        ctx.warning("cache/hf-home-unwritable", svc.path + ("user",) if "user" in svc.data else path,
                    f"the server runs as a uid without a home ({how}): huggingface_hub keeps {repo} in "
                    f"{cache} and a non-root process cannot create /.cache",
                    "set HF_HOME to a mounted, writable directory")
    if mount_at(cache, ms) is not None:
        return
    elsewhere = _cache_like(ms)
    names = ", ".join(f"{w} {r}" for w, r, _ in repos)
    there = (f"; the cache mounted at {elsewhere.target} is not where it looks" if elsewhere is not None else "")
    fix = (f"set HF_HOME={elsewhere.target} (or HF_HUB_CACHE={elsewhere.target} when it holds the models--* "
           f"directories itself), or mount it at {cache}" if elsewhere is not None
           else f"mount the host's Hugging Face cache at {cache} (or set HF_HOME to where it is mounted)")
    if offline:
        ctx.error("cache/hf-offline-not-mounted", path,
                  f"{names}: a Hugging Face repo id, and {'='.join([offline[0], env[offline[0]]])} forbids any "
                  f"download, but huggingface_hub looks for it in {cache} ({how}), which no mount "
                  f"provides: the start fails at once (\"couldn't find it in the cached files\"){there}", fix)
    else:
        report = ctx.warning if elsewhere is not None else ctx.info
        report("cache/hf-not-mounted", path,
                    f"{names}: a Hugging Face repo id that huggingface_hub keeps in {cache} ({how}), which "
                    f"no mount provides: the whole model is downloaded again into the container's "
                    f"writable layer on every re-create{there}", fix)


def _cache_like(ms: list[MountItem]) -> MountItem | None:
    """A mount that looks like a Hugging Face cache (its target or host source says so)."""
    for m in ms:
        if any(_CACHE_WORDS.search(x or "") for x in (m.target, m.source)):
            return m
    return None
