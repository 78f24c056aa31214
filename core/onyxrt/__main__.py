"""``python -m onyxrt ...`` runs the ``onyxrt`` command-line tool (see :mod:`onyxrt.cli`)."""

import sys

from .cli import main

sys.exit(main())
