from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")
# torch_models.py beside the tests, as the onnx tests import their helpers
sys.path.insert(0, os.path.dirname(__file__))
