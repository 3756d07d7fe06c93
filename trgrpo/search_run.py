"""Notebook 07's runs (paper Table 3): its parameters cell -> run specs of the task ``search``
(:mod:`trgrpo.tasks.search`, options :class:`~trgrpo.tasks.search.SearchOptions`), launched as notebooks 05 / 06
launch theirs (:func:`trgrpo.fullscale.launch`: one process per run); and a local retrieval server process."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from trgrpo.experiment import ROOT, RunSpec, run_name
from trgrpo.tasks.search import SearchOptions
from trgrpo.tasks.search_data import TABLE3_DATASETS, ServerRetriever

# Optional notebook-07 parameters (a None value also takes the default), besides the task options (their defaults are
# SearchOptions'); the others are required.
SEARCH_PARAMETER_DEFAULTS = {
    "MICRO_BATCH_SIZE": 2,
    "GRADIENT_CHECKPOINTING": True,
    "BF16": True,
    "VLLM_GPU_MEMORY": 0.3,
    "SAVE_STEPS": 20,
}
# The notebook-07 parameters named as a task option (of :class:`SearchOptions`; RETRIEVER_URL: ``url``) or a
# run-spec field in upper case.
OPTION_PARAMETERS = ("corpus", "corpus_seed", "train_file", "data_dir", "retriever", "top_k", "template")
OPTION_PARAMETERS += ("max_tool_calls", "eval_every", "scale")
SPEC_PARAMETERS = ("steps", "prompts_per_step", "num_generations", "max_completion_length", "micro_batch_size")
SPEC_PARAMETERS += ("gradient_checkpointing", "bf16", "save_steps", "n_train")


def search_specs(
    params: dict[str, Any],
    *,
    use_vllm: bool = False,
    init_model: str | None = None,
    warm_start: dict[str, Any] | None = None,
) -> list[RunSpec]:
    """The runs of notebook 07 for the values of its parameters cell (upper-case names): one per scheme and seed,
    trained from ``init_model`` (a warm start; default ``MODEL``); ``N_EVAL`` counts per QA set with Search-R1's
    data, in total with the synthetic corpus."""
    p = {**SEARCH_PARAMETER_DEFAULTS, **{k: v for k, v in params.items() if v is not None}}
    defaults = SearchOptions().model_dump()
    options = {name: p.get(name.upper(), defaults[name]) for name in OPTION_PARAMETERS}
    options["url"] = p.get("RETRIEVER_URL", defaults["url"])
    options["warm_start"] = {k: v for k, v in (warm_start or {}).items() if k != "losses"} or None
    n_eval = p["N_EVAL"] * (len(TABLE3_DATASETS) if options["corpus"] == "searchr1" else 1)
    common = dict(
        {name: p[name.upper()] for name in SPEC_PARAMETERS},
        task="search",
        model=str(init_model or p["MODEL"]),
        temperature=float(p["TEMPERATURE"]),
        learning_rate=float(p["LEARNING_RATE"]),
        use_vllm=use_vllm,
        vllm_gpu_memory_utilization=float(p["VLLM_GPU_MEMORY"]),
        n_eval=n_eval,
        eval_before=True,
        task_options=options,
        group=f"search/{options['scale']}",
    )
    return [
        RunSpec(**common, scheme=s, seed=seed, name=run_name("search", p["MODEL"], s, seed))
        for s in p["SCHEMES"]
        for seed in p["SEEDS"]
    ]


@contextlib.contextmanager
def retrieval_server(port: int | None, *args: str, wait_s: float = 60.0) -> Iterator[str]:
    """``scripts/retrieval_server.py --port PORT ARGS`` as its own process on 127.0.0.1 (``port`` None: a free one),
    its health check answered within ``wait_s`` (else a RuntimeError with its output); yields its ``/retrieve`` URL,
    stops it on exit."""
    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
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
