"""Suite-wide settings: every compile in the tests verifies the graph after each lowering stage."""

from __future__ import annotations

import os

os.environ.setdefault("AOTC_VERIFY_STAGES", "1")
# Compiles schedule and generate kernels but build no cubins: the tests that check the ahead-of-time
# compile ask for their targets themselves (a cold compile costs seconds per kernel).
os.environ.setdefault("AOTC_TARGETS", "none")
