"""``aotc.functional`` (``import aotc.functional as F``): torch.nn.functional's inference subset."""

from aotc.frontend.functional import *  # noqa: F403
from aotc.frontend.functional import RMS_NORM_EPS, __all__  # noqa: F401
