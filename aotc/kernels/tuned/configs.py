"""Tile configs as the tuned table stores them, and the legal tile space of each tunable template: a config read
from a file becomes a ``TileConfig`` / ``AttentionConfig`` only when the template can emit it for the key's
problem on the arch (every emitted tile is masked, so a legal config is never a wrong kernel; the limits here
keep it from being one that does not compile or launch: shared memory, accumulator registers, tl.dot's 16)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aotc.errors import UnsupportedError
from aotc.ir.dtypes import DType
from aotc.ir.tiles import DEFAULT_SHARED, SHARED_LIMIT, TileConfig, check_dot_config
from aotc.kernels.attention import AttentionConfig
from aotc.kernels.recurrent import RecurrentConfig

Tile = TileConfig | AttentionConfig | RecurrentConfig
GEMM_FIELDS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
ATTENTION_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")
RECURRENT_FIELDS = ("block_m", "num_warps")
# A matmul config's one optional field: its persistent form (true), where the product's batch folds into its rows.
PERSISTENT = "persistent"
RECURRENT_ROWS = (16, 32, 64, 128)  # tl.dot's smallest M up to what one program's state tiles hold
# Tiles of a recurrence's state one thread holds at once: the state, its cell value, a gate and a product.
RECURRENT_LIVE_TILES = 4
MAX_BLOCK = 256
MAX_STAGES = 6
WARPS = (1, 2, 4, 8)
# fp32 accumulator elements one thread may hold: past this a tile spills (255 registers per thread at most).
MAX_ACC_PER_THREAD = 256


def fields_of(kind: str) -> tuple[str, ...]:
    return {"attention": ATTENTION_FIELDS, "recurrent_cell": RECURRENT_FIELDS}.get(kind, GEMM_FIELDS)


def tile_to_json(tile: Tile) -> dict[str, int]:
    kind = {AttentionConfig: "attention", RecurrentConfig: "recurrent_cell"}.get(type(tile), "matmul")
    out = {f: int(getattr(tile, f)) for f in fields_of(kind)}
    if getattr(tile, "persistent", False):  # absent when off: the tables written before it read the same
        out[PERSISTENT] = True
    return out


def tile_from_json(kind: str, raw: Any, key: Mapping[str, Any], arch: str) -> Tile:
    """The config ``raw`` (a JSON object) for a ``kind`` launch with tuning key ``key`` on ``arch`` ("sm_90");
    UnsupportedError naming the field, the value and what was expected when it is outside the legal space."""
    names = fields_of(kind)
    optional = {PERSISTENT} if kind == "matmul" else set()
    if not isinstance(raw, Mapping) or not set(names) <= set(raw) <= set(names) | optional:
        got = sorted(raw) if isinstance(raw, Mapping) else type(raw).__name__
        want = (
            f"the fields {list(names)}, and optionally {sorted(optional)}"
            if optional
            else f"exactly the fields {list(names)}"
        )
        raise UnsupportedError(f"tiles {got}: a {kind} config has {want}")
    persistent = raw.get(PERSISTENT, False)
    if not isinstance(persistent, bool):
        raise UnsupportedError(f"tiles {PERSISTENT}={persistent!r}: expected true or false")
    if persistent and key["buckets"].get("batch", 1) != 1:
        raise UnsupportedError(
            f"tiles {PERSISTENT}=true for a product batched over {key['buckets']['batch']} entries on the grid: the "
            "persistent form takes only a product whose batch folds into its rows"
        )
    for f in names:
        v = raw[f]
        if isinstance(v, bool) or not isinstance(v, int):
            raise UnsupportedError(f"tiles {f}={v!r}: expected an int")
    if raw["num_warps"] not in WARPS:
        raise UnsupportedError(f"tiles num_warps={raw['num_warps']}: expected one of {list(WARPS)}")
    item = DType(key["dtypes"][0]).itemsize
    threads = 32 * raw["num_warps"]
    if kind == "recurrent_cell":
        tile, shared, acc = _recurrent(raw, key, item, threads)
        held = "state elements"
    else:
        tile, shared, acc = _contraction(kind, raw, key, item, threads)
        held = "accumulators"
    limit = SHARED_LIMIT.get(int(arch.removeprefix("sm_").rstrip("a")), DEFAULT_SHARED)
    if shared > limit:
        raise UnsupportedError(f"tiles {tile_to_json(tile)} need {shared} bytes of shared memory; {arch} has {limit}")
    if acc > MAX_ACC_PER_THREAD:
        raise UnsupportedError(
            f"tiles {tile_to_json(tile)} hold {acc} {held} per thread; at most {MAX_ACC_PER_THREAD} fit in registers"
        )
    return tile


def _contraction(
    kind: str, raw: Mapping[str, Any], key: Mapping[str, Any], item: int, threads: int
) -> tuple[Tile, int, int]:
    """A matmul's, conv's or attention's tile, with the shared memory and accumulators per thread it needs."""
    if not 1 <= raw["num_stages"] <= MAX_STAGES:
        raise UnsupportedError(f"tiles num_stages={raw['num_stages']}: expected 1 to {MAX_STAGES}")
    for f in ("block_m", "block_n", "block_k"):
        if f in raw and raw[f] > MAX_BLOCK:
            raise UnsupportedError(f"tiles {f}={raw[f]}: expected at most {MAX_BLOCK}")
    if kind == "attention":
        tile: Tile = AttentionConfig(raw["block_m"], raw["block_n"], raw["num_warps"], raw["num_stages"])
        static = key["static"]
        dp, ep = (max(16, _pow2(int(static[n]))) for n in ("head_dim", "value_dim"))
        # Q is loaded once; K and V are pipelined over the stages (d128 at 128x128, 3 stages: 224 KiB, as compiled)
        return (
            tile,
            (tile.block_m * dp + tile.num_stages * tile.block_n * (dp + ep)) * item,
            tile.block_m * ep // threads,
        )
    tile = check_dot_config(TileConfig(*(raw[f] for f in GEMM_FIELDS), persistent=raw.get(PERSISTENT, False)))
    if not 1 <= tile.group_m <= 64:
        raise UnsupportedError(f"tiles group_m={tile.group_m}: expected 1 to 64")
    shared = (tile.block_m + tile.block_n) * tile.block_k * item * tile.num_stages
    return tile, shared, tile.block_m * tile.block_n // threads


def _recurrent(
    raw: Mapping[str, Any], key: Mapping[str, Any], item: int, threads: int
) -> tuple[RecurrentConfig, int, int]:
    """A recurrence's rows per program and warps, with the shared memory and state elements per thread its state's
    width and its products' K need."""
    if raw["block_m"] not in RECURRENT_ROWS:
        raise UnsupportedError(f"tiles block_m={raw['block_m']}: expected one of {list(RECURRENT_ROWS)}")
    tile = RecurrentConfig(raw["block_m"], raw["num_warps"])
    static = key["static"]
    block_h, block_k = max(16, _pow2(int(static["state"]))), max(16, _pow2(max(int(k) for k in static["k"])))
    # the widest product's operands, staged in shared memory for tl.dot: the rows' K and the weight's K x H
    shared = (tile.block_m + block_h) * block_k * item
    return tile, shared, RECURRENT_LIVE_TILES * tile.block_m * block_h // threads


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
