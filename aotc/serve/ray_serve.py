"""Scale-out on Ray Serve (``pip install 'aotc[ray]'``): the same ``AotcModel`` as Ray Serve replicas.

Each replica is an ``AotcReplica``, the KServe model class itself, which loads its artifact once, in its own
process, when Ray starts it. Ray Serve's ``@serve.batch`` collects the requests that reach a replica together;
``batching.group`` then runs those that share every non-batch dim as one call along the batch dim. The v2
front end is KServe's Ray integration: ``aotc serve --replicas N`` serves a ``kserve.ray.RayModel`` whose calls
go through the deployment's handle, so clients see the same endpoints, metadata and errors as without Ray.

In Python (on a GPU cluster, give each replica a GPU)::

    from ray import serve
    from aotc.serve.ray_serve import deployment

    app = deployment("bert.aotc", name="bert", num_replicas=4, ray_actor_options={"num_gpus": 1})
    handle = serve.run(app, name="bert", route_prefix=None)

and hand ``ray_model_class()("bert", handle)`` to ``aotc.serve.server.serve``, as ``deploy()`` does.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Mapping
from typing import Any

from ray import serve

from aotc.serve._sdk import InferRequest, InvalidInput
from aotc.serve.batching import Feeds, Outputs, group, run_grouped
from aotc.serve.model import AotcModel, InternalError

_RAY_BATCH = 64  # @serve.batch's initial cap in requests; each replica sets its own from its artifact


class AotcReplica(AotcModel):
    """One Ray Serve replica: an ``AotcModel`` loaded at start, batching through Ray Serve's ``@serve.batch``."""

    def __init__(self, name: str, path: str, **settings: Any) -> None:
        from aotc.serve.server import configure_logging

        configure_logging()
        super().__init__(name, path, **settings)
        self.load()
        self._batcher = None  # Ray Serve batches here, not aotc's own queue
        try:
            self.replica = serve.get_replica_context().replica_tag
        except Exception:  # outside a replica (a test calling the class directly)
            self.replica = str(os.getpid())
        self.response_parameters = {"aotc_replica": self.replica}
        self._batched.set_max_batch_size(max(1, self.max_batch))
        self._batched.set_batch_wait_timeout_s(self.batch_timeout_ms / 1e3)

    def load(self) -> bool:
        if self.ready:  # KServe's RayModel asks each model to load: the replica did when it started
            return True
        return super().load()

    async def run(self, feeds: Feeds) -> Outputs:
        if self.axes is None or self.max_batch <= 1:
            return await super().run(feeds)
        result = await self._batched(feeds)
        if isinstance(result, BaseException):
            raise result
        return result

    @serve.batch(max_batch_size=_RAY_BATCH, batch_wait_timeout_s=0.0)
    async def _batched(self, requests: list[Feeds]) -> list[Outputs | BaseException]:
        assert self.axes is not None
        loop = asyncio.get_running_loop()
        results: list[Any] = [None] * len(requests)
        for batch in group(self.axes, requests, self.max_batch, self.exe.check):
            done = await loop.run_in_executor(None, run_grouped, self._call, self.axes, [requests[i] for i in batch])
            for i, result in zip(batch, done):
                results[i] = result
        return results


def deployment(
    path: str | os.PathLike[str],
    *,
    name: str,
    num_replicas: int = 1,
    ray_actor_options: Mapping[str, Any] | None = None,
    max_ongoing_requests: int = 128,
    **settings: Any,
) -> Any:
    """A Ray Serve application of ``AotcReplica``s serving ``path``; ``settings`` are ``AotcModel``'s (device,
    max_batch, batch_timeout_ms, batch_dim, load_options)."""
    options = dict(ray_actor_options or {})
    return serve.deployment(
        AotcReplica,
        name=name,
        num_replicas=num_replicas,
        ray_actor_options=options,
        max_ongoing_requests=max_ongoing_requests,
    ).bind(name, os.fspath(os.path.abspath(path)), **settings)


@functools.cache
def ray_model_class() -> type:
    """KServe's ``RayModel`` (the v2 front end's view of a deployment) with aotc's metadata, no second load and
    requests that Ray can pickle. Built on first use: ``kserve.ray`` is importable only after ``_sdk``."""
    from kserve.ray import RayModel

    class AotcRayModel(RayModel):
        def load(self) -> bool:
            self.ready = True  # each replica loaded its artifact when it started
            return True

        async def metadata(self) -> dict[str, Any]:
            return await self._handle.metadata.remote()

        async def __call__(self, body: Any, headers: dict[str, str] | None = None, verb: Any = None) -> Any:
            if isinstance(body, InferRequest):
                for t in body.inputs:
                    if isinstance(t._raw_data, memoryview):  # a view of the REST body: Ray needs bytes
                        t._raw_data = t._raw_data.tobytes()
            try:
                return await self._handle.remote(body, headers=headers)
            except Exception as e:  # Ray wraps the replica's exception: hand on the replica's own (400 or 500)
                cause = getattr(e, "cause", None)
                if isinstance(cause, (InvalidInput, InternalError)):
                    raise cause from None
                raise

    return AotcRayModel


def deploy(
    path: str | os.PathLike[str],
    *,
    name: str,
    num_replicas: int,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    **settings: Any,
) -> Any:
    """Start (or join, with RAY_ADDRESS) a Ray cluster, run ``num_replicas`` replicas of ``path`` and return the
    KServe model that sends each request to them."""
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, ignore_reinit_error=True)
    serve.start(proxy_location="Disabled")  # requests come through aotc's v2 server, not Ray's HTTP proxy
    options = {"num_cpus": num_cpus} | ({"num_gpus": num_gpus} if num_gpus else {})
    app = deployment(path, name=name, num_replicas=num_replicas, ray_actor_options=options, **settings)
    handle = serve.run(app, name=name, route_prefix=None)
    model = ray_model_class()(name, handle)
    model.load()
    return model
