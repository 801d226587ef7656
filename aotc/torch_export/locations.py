"""Where an FX node came from, for messages (the model's source line, the submodule), and what makes two named
tensors one stored tensor."""

from __future__ import annotations

import os
import re
from typing import Any

from aotc.frontend.source_paths import source_path
from aotc.torch_export._torch import require_torch

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def node_module(node: Any) -> str:
    """The path of the innermost submodule whose forward recorded the node ("encoder.layer.0.attention"), from
    torch.export's ``nn_module_stack``; "" for the root module or when torch recorded none."""
    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    return path if isinstance(path, str) else ""


def node_loc(node: Any) -> str:
    """``file:line`` of the innermost frame of the node's stack trace outside torch itself: the model's source
    line (a Hugging Face modeling file, torchvision, or the user's own)."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    torch_dir = os.path.dirname(require_torch().__file__) + os.sep
    outside = [f for f in frames if not os.path.abspath(f[0]).startswith(torch_dir)]
    path, line = (outside or frames)[-1]
    return f"{source_path(path)}:{line}"


def storage_key(t: Any) -> tuple:
    """What makes two named tensors one stored tensor: the same elements of the same storage."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), str(t.dtype))
