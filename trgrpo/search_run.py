"""Notebook 07's local retrieval server process (its runs are specs of the task ``search``, built as notebooks 05 / 06
build theirs: :func:`trgrpo.fullscale.specs_from_parameters`)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

from trgrpo.experiment import ROOT
from trgrpo.fullscale import free_port
from trgrpo.tasks.search_data import ServerRetriever


@contextlib.contextmanager
def retrieval_server(port: int | None, *args: str, wait_s: float = 60.0) -> Iterator[str]:
    """``scripts/retrieval_server.py --port PORT ARGS`` as its own process on 127.0.0.1 (``port`` None: a free one),
    its health check answered within ``wait_s`` (else a RuntimeError with its output); yields its ``/retrieve`` URL,
    stops it on exit."""
    port = free_port() if port is None else port
    cmd = [sys.executable, str(ROOT / "scripts" / "retrieval_server.py"), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/retrieve"
    try:
        deadline, error = time.monotonic() + wait_s, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ServerRetriever(url, timeout=2.0).check()
                break
            except ConnectionError as e:
                error = e
                time.sleep(0.2)
        else:
            out = proc.stdout.read() if proc.poll() is not None else ""
            raise RuntimeError(f"retrieval server on port {port} not ready in {wait_s:g} s: {error} {out[-400:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
