"""``python -m host``: the host process (``host.main``), as the runtime starts it."""

import sys

from host.main import main

sys.exit(main())
