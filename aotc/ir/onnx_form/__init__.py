"""Graphs as ONNX without the onnx package (part of aotc.ir: the runtime and aotc.onnx import it).

Graphs written as ONNX models with no onnx package: a protobuf writer of the messages aotc writes (proto.py),
the export opset and its type table (opset.py), one emitter per op (emitters.py) over an export state
(context.py), and the model assembly with the op-table decomposition as fallback (build.py).

It sits in the IR layer so that both the runtime (which builds the model onnxruntime runs from the graph it has
verified) and aotc.onnx (``aotc export-onnx``) write models through this one emission.
"""

from aotc.ir.onnx_form.build import IdBound, OnnxForm, build_model

__all__ = ["IdBound", "OnnxForm", "build_model"]
