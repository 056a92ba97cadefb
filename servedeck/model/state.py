"""The per-user state directory (below the project model and the image catalog, which both
use it)."""

from __future__ import annotations

import os
from pathlib import Path

STATE_ENV = "SERVEDECK_STATE_DIR"


def state_dir() -> Path:
    """The per-user state directory: ``$SERVEDECK_STATE_DIR``, else the platform's convention
    (``platformdirs.user_state_dir("servedeck")``: ``$XDG_STATE_HOME/servedeck`` or
    ``~/.local/state/servedeck`` on Linux). Holds the image catalog of a user who works
    without a project. Not created here."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    import platformdirs
    return Path(platformdirs.user_state_dir("servedeck", appauthor=False))
