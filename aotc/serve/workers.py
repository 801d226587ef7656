"""The REST worker processes of ``aotc serve --workers N``: KServe's supervisor, patient with a worker that is
still starting.

Each worker is a spawned interpreter that imports the SDK and aotc and loads the artifacts before it answers the
supervisor's first ping. The SDK gives every ping 5 seconds and kills a worker that misses one, so on a busy
machine (a start that takes more than 5 s) it killed each new worker before it had started, and respawned it, for
as long as the server ran: nothing ever served. Here a worker that has not answered yet has ``STARTUP_S`` to do
so while its process lives; once it has answered, it is held to the SDK's ping as before.
"""

from __future__ import annotations

import logging
from socket import socket
from time import monotonic

from aotc.serve._sdk import RESTServerMultiProcess, RESTServerProcess

log = logging.getLogger("kserve.aotc")

STARTUP_S = 120.0


class Workers(RESTServerMultiProcess):
    """``RESTServerMultiProcess`` whose keep-alive lets a starting worker start (see the module docstring)."""

    def init_processes(self, sockets: list[socket]) -> None:
        super().init_processes(sockets)
        self._starting = {p: [monotonic(), False] for p in self._processes}

    async def keep_subprocess_alive(self, sockets: list[socket]) -> None:
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self._processes):
            if self._alive(process):
                continue
            self._starting.pop(process, None)
            process.kill()
            await process.wait_for_termination()
            if self.should_exit.is_set():
                return
            log.info("REST worker process [%s] died; starting another", process.pid)
            process = RESTServerProcess(sockets, self._rest_server.run, log_config_file=self.log_config_file)
            process.start()
            self._processes[idx] = process
            self._starting[process] = [monotonic(), False]

    def _alive(self, process: RESTServerProcess) -> bool:
        starting = self._starting.get(process)
        if starting is None:
            return process.is_alive()
        if not process._process.is_alive():
            return False
        since, asked = starting
        conn = process._parent_conn
        if not asked:
            conn.send(b"ping")  # answered once the worker's pong thread runs
            starting[1] = True
        if conn.poll(0):
            conn.recv()
            del self._starting[process]
            return True
        return monotonic() - since < STARTUP_S
