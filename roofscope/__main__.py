from __future__ import annotations

import sys

from roofscope.cli import main

sys.exit(main())
