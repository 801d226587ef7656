"""A real server whose model fails inside on purpose, for the internal-error test: the MLP artifact, except that a
request whose first value is 13.0 raises a RuntimeError in the model call.

    python faulty_server.py ARTIFACT HTTP_PORT GRPC_PORT
"""

from __future__ import annotations

import sys
from typing import Any

from aotc.serve.model import AotcModel
from aotc.serve.server import serve


class Faulty(AotcModel):
    def _call(self, feeds: Any) -> Any:
        if float(next(iter(feeds.values())).flat[0]) == 13.0:
            raise RuntimeError("a deliberate failure inside the model call")
        return super()._call(feeds)


if __name__ == "__main__":
    path, http_port, grpc_port = sys.argv[1:4]
    model = Faulty("mlp", path, max_batch=4)
    model.load()
    serve([model], http_port=int(http_port), grpc_port=int(grpc_port))
