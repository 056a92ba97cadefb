"""The repository's invoke tasks: servedeck's own command line plus development tasks.

The user-facing tasks live in the package (:mod:`servedeck.cli`, also the ``servedeck``
console script); this file re-exports that collection for ``invoke TASK`` from a checkout
(``invoke render --profile speed``, ``invoke deploy --host b70``) and adds the development
tasks of :mod:`devtools.tasks` (``image-build``, ``demo``, ``lint``, ``test``).
Run ``invoke --list`` for the tasks and ``invoke --help TASK`` for one task's options.
"""

from devtools.tasks import demo, image_build, lint, test
from servedeck.cli import namespace

ns = namespace()
for _dev_task in (image_build, demo, lint, test):
    ns.add_task(_dev_task)
