"""``python -m roofscope.collectors.inject``: see bootstrap.py."""
from __future__ import annotations

import sys

from roofscope.collectors.inject.bootstrap import main

sys.exit(main())
