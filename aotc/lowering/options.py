"""The one compile-options object. Environment variables are read here and nowhere else."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class CompileOptions:
    """Everything that changes what the compiler produces; ``key()`` hashes it for caches."""

    fold_constants: bool = True
    cse: bool = True
    # Folding never materializes a constant larger than this unless its inputs were as large.
    max_fold_bytes: int = 1 << 16
    # Tests verify after every stage (AOTC_VERIFY_STAGES=1); a plain compile verifies its input and result.
    verify_each_stage: bool = False

    def key(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_meta(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_env(cls) -> CompileOptions:
        """Defaults overridden by AOTC_NO_FOLD=1 / AOTC_NO_CSE=1 (to bisect a miscompile) and
        AOTC_VERIFY_STAGES=1 (verify the graph after every stage, as the tests do)."""
        return cls(
            fold_constants=os.environ.get("AOTC_NO_FOLD", "") != "1",
            cse=os.environ.get("AOTC_NO_CSE", "") != "1",
            verify_each_stage=os.environ.get("AOTC_VERIFY_STAGES", "") == "1",
        )
