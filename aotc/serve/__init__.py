"""Serving artifacts (imported by the CLI and servers; imports aotc.runtime only, never the compiler).

Serving artifacts: ``aotc serve`` (KServe's Open Inference Protocol, dynamic batching), Ray Serve replicas and
a Triton Inference Server model repository.

Imports the runtime only, never the compiler. The KServe SDK (``pip install 'aotc[serve]'``) and Ray Serve
(``pip install 'aotc[ray]'``) are imported by the modules that need them: ``model``, ``server`` and
``ray_serve``; ``signature``, ``codec``, ``batching`` and ``triton_repo`` need numpy alone.
"""
