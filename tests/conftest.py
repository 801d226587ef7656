"""Suite-wide settings: every compile in the tests verifies the graph after each lowering stage."""

from __future__ import annotations

import os

os.environ.setdefault("AOTC_VERIFY_STAGES", "1")
