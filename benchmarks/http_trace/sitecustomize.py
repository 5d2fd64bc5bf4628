"""Loaded by every Python process started with this folder on PYTHONPATH (deploy_latency.py
--trace-http): appends one line per Flower HTTP request, ``pid start end path``, to the file
named by $FEDGS_HTTP_TRACE, so one deployed step can be cut into its phases afterwards."""

import os
import time

TRACE_FILE = os.environ.get("FEDGS_HTTP_TRACE")

if TRACE_FILE:
    import httpx

    _send = httpx.Client.send

    def _traced_send(self, request, *args, **kwargs):  # type: ignore[no-untyped-def]
        started = time.time()
        try:
            return _send(self, request, *args, **kwargs)
        finally:
            line = f"{os.getpid()} {started:.4f} {time.time():.4f} {request.url.path}\n"
            with open(TRACE_FILE, "a") as trace:  # noqa: PTH123 - one short append per request
                trace.write(line)

    httpx.Client.send = _traced_send
