"""Fusion, memory plan, Triton codegen and AOT compile (imported by the compiler and autotune; imports aotc.ir).

The kernel layer: fusion into kernels (the schedule), the memory plan and readable Triton source per kernel.

``schedule_graph(graph, options)`` (aotc.kernels.scheduler) turns a lowered primitive graph into an
``aotc.ir.schedule.Schedule``; ``explain(graph, schedule)`` (aotc.kernels.explain) says what it fused and why
it declined the rest. Triton itself is imported only by the ahead-of-time compile step.
"""
