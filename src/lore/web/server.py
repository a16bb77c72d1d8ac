"""The uvicorn server of ``lore serve``: it stops a running sync as soon as it is told to
stop, and drains its connections without resetting one.

uvicorn's graceful shutdown lets the requests in flight finish (within
``timeout_graceful_shutdown``) before the application's lifespan ends, and the lifespan's
end is where the sync runner stops a running sync. An upload or edit waiting for the
write lock behind a sync is such a request: it kept the sync running to its end (seconds
or minutes) before the server could stop. Here the sync is asked to stop when the signal
arrives; it stops at its next document (each is one transaction, so the index is whole),
the waiting write runs, the requests finish, and the server exits.

Connections are drained, not reset, as ``lore.draining`` does for every HTTP server of lore.
"""

from __future__ import annotations

import threading
from types import FrameType

import uvicorn

from lore.draining import DrainingServer
from lore.web.sync_process import SyncProcess


class StoppingServer(DrainingServer):
    def __init__(self, config: uvicorn.Config, sync: SyncProcess | None) -> None:
        super().__init__(config)
        self._sync = sync
        #: The first signal that stopped the server (SIGINT: Ctrl-C), None until one does.
        self.stopped_by: int | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stopped_by is None:
            self.stopped_by = sig
        if self._sync is not None and not self.should_exit:
            # Off the signal handler: ``stop`` waits for the child to reach a document.
            threading.Thread(target=self._sync.stop, name="lore-stop-sync", daemon=True).start()
        super().handle_exit(sig, frame)
