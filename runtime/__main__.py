"""``python -m runtime``: the ``quiesce`` command (``runtime.cli``)."""

import sys

from runtime.cli import main

sys.exit(main())
