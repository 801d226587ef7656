"""Graph -> Graph lowering passes and their pipeline (imported by the compiler; imports aotc.ir only).

The pipeline (pipeline.py) is a named, ordered list of stages, each a function Graph -> Graph, dumped with
``--dump-ir`` and verified after each stage; the passes are decompose, attention, simplify, precision, CSE,
constant folding, matmul padding, split-K and DCE.
"""
