"""The one compile-options object. Environment variables are read here and nowhere else."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

from aotc.errors import AotcError, UnsupportedError
from aotc.ir import launch
from aotc.lowering.precision import check_precision


@dataclass(frozen=True)
class CompileOptions:
    """Everything that changes what the compiler produces; ``key()`` hashes it for caches."""

    fold_constants: bool = True
    cse: bool = True
    # Folding never materializes a constant larger than this unless its inputs were as large.
    max_fold_bytes: int = 1 << 16
    # Tests verify after every stage (AOTC_VERIFY_STAGES=1); a plain compile verifies its input and result.
    verify_each_stage: bool = False
    # Keep SDPA whole and fold hand-written softmax(q @ k^T * s + mask) @ v into it (aotc/lowering/attention.py),
    # so attention runs as one fused kernel.
    fuse_attention: bool = True
    # "fp32" (as traced), "tf32" (float32 matmuls may use tf32 tensor cores on a GPU), "tf32x3" (float32 matmuls
    # in three tf32 products on tensor cores: float32-class error), "bf16" or "fp16" (contractions in half
    # precision with float32 accumulation, weights stored in it): see lowering/precision.py.
    precision: str = "fp32"
    # Pad matmul dims that break 16-byte alignment when it pays (lowering/padding.py).
    matmul_padding: bool = True
    # Split the K loop of small-output, long-K matmuls over several programs (lowering/splitk.py).
    split_k: bool = True
    # Fuse the lowered graph into Triton kernels (aotc.kernels) and store their launch plan.
    kernels: bool = True
    # GPU architectures the kernels are compiled for ahead of time; () schedules and generates the
    # kernels (enough for the interpret backend) but compiles no binaries.
    targets: tuple[str, ...] = ("sm_80", "sm_90")
    # Time candidate tiles of the matmul, conv and attention kernels on this machine's GPU and record the
    # winners for its target (aotc/autotune.py); needs a GPU. ``tune_dims`` binds dims for the
    # timing, as (name, value) pairs; a dim not named is timed at its maximum. The tuned table's lookup
    # (aotc/kernels/tuned/) buckets dynamic dims at the same shape.
    autotune: bool = False
    tune_dims: tuple[tuple[str, int], ...] = ()
    # The oldest CUDA driver (release "MAJOR.MINOR") the compiled kernels must load on: it picks each target's
    # ptxas and PTX version (aotc/kernels/toolchain.py). The default serves R550 drivers (CUDA 12.4) and newer.
    cuda_driver_floor: str = launch.DEFAULT_DRIVER_FLOOR

    def __post_init__(self) -> None:
        check_precision(self.precision)
        object.__setattr__(self, "targets", check_targets(self.targets))
        object.__setattr__(self, "cuda_driver_floor", launch.check_driver_floor(self.cuda_driver_floor))
        if self.autotune and not self.targets:
            raise AotcError("autotune needs GPU targets to record its winners for, but targets is empty")

    def key(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def to_meta(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_env(cls) -> CompileOptions:
        """Defaults overridden by AOTC_NO_FOLD=1 / AOTC_NO_CSE=1 / AOTC_NO_FUSE_ATTENTION=1 /
        AOTC_NO_SPLIT_K=1 / AOTC_NO_KERNELS=1 (to bisect a miscompile), AOTC_TARGETS=sm_80,sm_90 or none,
        AOTC_CUDA_DRIVER_FLOOR=12.8 (as --cuda-driver-floor: from 12.7 the sm_90 attention loads through TMA)
        and AOTC_VERIFY_STAGES=1 (verify the graph after every stage, as the tests do)."""
        targets = os.environ.get("AOTC_TARGETS")
        floor = os.environ.get("AOTC_CUDA_DRIVER_FLOOR")
        if floor:
            try:
                floor = launch.check_driver_floor(floor)
            except UnsupportedError as e:
                raise UnsupportedError(f"AOTC_CUDA_DRIVER_FLOOR: {e}") from None
        return cls(
            fold_constants=os.environ.get("AOTC_NO_FOLD", "") != "1",
            cse=os.environ.get("AOTC_NO_CSE", "") != "1",
            verify_each_stage=os.environ.get("AOTC_VERIFY_STAGES", "") == "1",
            fuse_attention=os.environ.get("AOTC_NO_FUSE_ATTENTION", "") != "1",
            split_k=os.environ.get("AOTC_NO_SPLIT_K", "") != "1",
            kernels=os.environ.get("AOTC_NO_KERNELS", "") != "1",
            **({} if targets is None else {"targets": parse_targets(targets)}),
            **({} if not floor else {"cuda_driver_floor": floor}),
        )


def parse_targets(text: str) -> tuple[str, ...]:
    """``"sm_80,sm_90"`` -> ("sm_80", "sm_90"); ``""`` or ``"none"`` -> () (no ahead-of-time compile)."""
    text = text.strip()
    if text.lower() in ("", "none"):
        return ()
    return check_targets(tuple(t.strip() for t in text.split(",")))


def check_targets(targets: object) -> tuple[str, ...]:
    """GPU architectures as ``sm_XY`` names, at least sm_80, no repeats; () compiles no binaries."""
    if isinstance(targets, (tuple, list)) and not targets:
        return ()
    return launch.check_targets(targets)  # type: ignore[arg-type]
