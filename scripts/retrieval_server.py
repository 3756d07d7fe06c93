"""A retrieval server in the HTTP protocol of Search-R1's ``retrieval_server.py`` (the paper's retriever, App. B.1.3).

    POST /retrieve  {"queries": [...], "topk": k, "return_scores": true}
                 -> {"result": [[{"document": {"id": ..., "contents": "\"Title\"\\ntext"}, "score": s}, ...], ...]}
    GET  /health    -> {"status": "ok", "backend": ..., "passages": n}

Backends:
    bm25 (default, CPU): bm25s over the generated corpus (trgrpo.tasks.search_data.make_corpus) or a corpus file
    e5 (GPU server): an E5 model from the hub + a FAISS index over the same corpus file, as Search-R1 serves wiki-18

    python scripts/retrieval_server.py --port 8000                                   # the generated corpus, BM25
    python scripts/retrieval_server.py --backend e5 --corpus wiki-18.jsonl --index e5_Flat.index \\
        --model intfloat/e5-base-v2 --port 8000                                      # the paper's setting
A corpus file is Search-R1's JSONL: one {"id", "contents"} per line, contents = '"Title"\\ntext'.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def read_corpus(path: str) -> list[dict]:
    """Passages ``{"id", "title", "text"}`` of a Search-R1 corpus JSONL file."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if line.strip():
                row = json.loads(line)
                title, _, text = str(row["contents"]).partition("\n")
                out.append({"id": str(row.get("id", i - 1)), "title": title.strip('"'), "text": text})
    return out


class E5Index:
    """Search-R1's dense retriever: E5 query embeddings (``"query: "`` prefix, mean pooling, unit length) searched
    in a FAISS inner-product index built over the corpus file's passages, in file order."""

    def __init__(self, passages: list[dict], index_path: str, model: str, device: str = "cuda") -> None:
        import faiss
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.passages, self.torch, self.device = passages, torch, device
        self.index = faiss.read_index(index_path)
        if self.index.ntotal != len(passages):
            raise SystemExit(f"{index_path}: {self.index.ntotal} vectors for {len(passages)} passages")
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model, dtype=torch.float16).to(device).eval()

    def batch_search(self, queries: list[str], k: int) -> list[list[dict]]:
        batch = self.tokenizer([f"query: {q}" for q in queries], padding=True, truncation=True, max_length=256)
        batch = {key: self.torch.tensor(v, device=self.device) for key, v in batch.items()}
        with self.torch.no_grad():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        emb = self.torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
        scores, idx = self.index.search(emb.float().cpu().numpy(), k)
        return [
            [{**self.passages[int(i)], "score": float(s)} for i, s in zip(row_i, row_s) if i >= 0]
            for row_i, row_s in zip(idx, scores)
        ]


class BadRequest(ValueError):
    """A request body the server answers with 400 and this one line."""


MAX_BODY_BYTES = 16 * 2**20  # a 256-rollout batch of 300-character queries is ~80 kB
MAX_QUERIES = 4096  # per request
MAX_TOPK = 1000


def parse_body(raw: bytes) -> tuple[list[str], int, bool]:
    """(queries, topk, return_scores) of a ``/retrieve`` body, or :class:`BadRequest` with one line: whatever the
    bytes (not JSON, nested 10^5 deep, ``topk: 1e400``, wrong types)."""
    try:
        req = json.loads(raw)
    except RecursionError:
        raise BadRequest("the body is JSON nested too deep") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise BadRequest(f"the body is not JSON ({str(e).splitlines()[0][:80]})") from None
    if not isinstance(req, dict):
        raise BadRequest(f"the body must be a JSON object {{'queries': [...], 'topk': k}}, got {type(req).__name__}")
    queries = req.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise BadRequest(f"'queries' holds {len(queries)} queries, at most {MAX_QUERIES} per request")
    k = req.get("topk", 3)
    k = 3 if k is None else k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOPK:
        raise BadRequest(f"'topk' must be an integer from 1 to {MAX_TOPK}, got {json.dumps(k)[:40]}")
    scores = req.get("return_scores", False)
    if not isinstance(scores, bool) and scores is not None:
        raise BadRequest(f"'return_scores' must be true or false, got {json.dumps(scores)[:40]}")
    return queries, k, bool(scores)


class Batcher:
    """One thread calls the backend (E5 on a GPU and FAISS are not used from many threads at once): the queries of
    every request waiting when it is free go to one ``batch_search`` call per ``topk`` (a flat index is scanned once
    per batch, not once per query). Counts requests, queries and backend calls for ``/health``."""

    def __init__(self, backend, max_batch: int = MAX_QUERIES) -> None:
        self.backend, self.max_batch = backend, max_batch
        self.waiting: queue.Queue = queue.Queue()
        self.stats = {"requests": 0, "queries": 0, "batches": 0, "largest_batch": 0, "errors": 0}
        threading.Thread(target=self._serve, daemon=True, name="retrieval-batcher").start()

    def search(self, queries: list[str], k: int) -> list[list[dict]]:
        job = {"queries": queries, "k": k, "done": threading.Event(), "result": None, "error": None}
        self.waiting.put(job)
        job["done"].wait()
        if job["error"] is not None:
            raise job["error"]
        return job["result"]

    def _serve(self) -> None:
        while True:
            jobs = [self.waiting.get()]
            n = len(jobs[0]["queries"])
            while n < self.max_batch:
                try:
                    jobs.append(self.waiting.get_nowait())
                except queue.Empty:
                    break
                n += len(jobs[-1]["queries"])
            for k in dict.fromkeys(j["k"] for j in jobs):
                group = [j for j in jobs if j["k"] == k]
                flat = [q for j in group for q in j["queries"]]
                self.stats["requests"] += len(group)
                self.stats["queries"] += len(flat)
                self.stats["batches"] += 1
                self.stats["largest_batch"] = max(self.stats["largest_batch"], len(flat))
                try:
                    rows, at = self.backend.batch_search(flat, k), 0
                    for j in group:
                        j["result"], at = rows[at : at + len(j["queries"])], at + len(j["queries"])
                except Exception as e:  # the handler answers 500 with it; the server goes on
                    self.stats["errors"] += 1
                    for j in group:
                        j["error"] = e
                for j in group:
                    j["done"].set()


def make_handler(backend, name: str, *, read_timeout_s: float = 10.0, batcher: Batcher | None = None):
    """The request handler: ``read_timeout_s`` bounds every read of a request (a Content-Length larger than the body
    is answered 400 after it, never holds the thread); every bad body a 400 with one line (:func:`parse_body`)."""
    batcher = batcher or Batcher(backend)

    class Handler(BaseHTTPRequestHandler):
        timeout = read_timeout_s  # socketserver.StreamRequestHandler.setup: connection.settimeout(timeout)

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client has gone
                self.close_connection = True

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/health":
                return self._send(404, {"error": "GET /health or POST /retrieve"})
            self._send(200, {"status": "ok", "backend": name, "passages": len(backend.passages), **batcher.stats})

        def _body(self) -> bytes:
            length = self.headers.get("Content-Length")
            try:
                n = int(length)
            except (TypeError, ValueError):
                raise BadRequest(f"Content-Length must be a number of bytes, got {length!r:.40}") from None
            if not 0 <= n <= MAX_BODY_BYTES:
                raise BadRequest(f"Content-Length {n}: the body must be 0 to {MAX_BODY_BYTES} bytes")
            try:
                raw = self.rfile.read(n)
            except TimeoutError:
                raw = b""
            if len(raw) < n:
                self.close_connection = True
                raise BadRequest(f"the body is shorter than its Content-Length {n} (no more in {self.timeout:g} s)")
            return raw

        def do_POST(self):  # noqa: N802
            if self.path != "/retrieve":
                return self._send(404, {"error": "POST /retrieve"})
            try:
                queries, k, with_scores = parse_body(self._body())
            except BadRequest as e:
                return self._send(400, {"error": str(e)})
            try:
                hits = batcher.search(queries, k) if queries else []
            except Exception as e:  # the backend failed on this batch: one line, the server goes on
                return self._send(500, {"error": f"the {name} backend failed: {type(e).__name__}: {e}"[:300]})
            docs = [[{"id": h["id"], "contents": f'"{h["title"]}"\n{h["text"]}'} for h in row] for row in hits]
            if with_scores:
                rows = [[{"document": d, "score": h["score"]} for d, h in zip(ds, row)] for ds, row in zip(docs, hits)]
                return self._send(200, {"result": rows})
            self._send(200, {"result": docs})

        def log_message(self, *args) -> None:  # quiet: one line per request would flood a training log
            pass

    return Handler


def make_server(host: str, port: int, handler, *, backlog: int = 1024) -> ThreadingHTTPServer:
    """A thread per connection (daemon threads) listening with ``backlog`` pending connections: the stdlib's
    ``socketserver.TCPServer.request_queue_size`` is 5 (``server_activate``: ``socket.listen(request_queue_size)``),
    so a burst of more clients than that loses connections to resets; the kernel caps it at net.core.somaxconn."""
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": backlog})
    return server_class((host, port), handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/retrieval_server.py", description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("bm25", "e5"), default="bm25")
    ap.add_argument("--corpus", default=None, help="Search-R1 corpus JSONL (default: the generated corpus)")
    ap.add_argument("--corpus-seed", type=int, default=0, help="seed of the generated corpus")
    ap.add_argument("--index", default=None, help="e5: the FAISS index over --corpus (Search-R1's e5_Flat.index)")
    ap.add_argument("--model", default="intfloat/e5-base-v2", help="e5: the query encoder")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument(
        "--backlog",
        type=int,
        default=1024,
        help="pending connections the socket queues (default 1024: a 256-rollout step of every rank at once, 4 times)",
    )
    ap.add_argument("--read-timeout", type=float, default=10.0, help="seconds a request's read may wait (default 10)")
    args = ap.parse_args(argv)
    from trgrpo.tasks.search_data import BM25Retriever, make_corpus

    if args.backlog < 1:
        ap.error(f"--backlog {args.backlog}: must be >= 1")
    if not 0 < args.read_timeout < float("inf"):
        ap.error(f"--read-timeout {args.read_timeout}: must be a number of seconds > 0")
    if args.corpus is not None and not Path(args.corpus).is_file():
        ap.error(f"--corpus {args.corpus}: no such file")
    passages = read_corpus(args.corpus) if args.corpus else make_corpus(args.corpus_seed).passages
    if args.backend == "e5":
        if not args.corpus or not args.index:
            ap.error("--backend e5 needs --corpus (JSONL) and --index (its FAISS index)")
        backend = E5Index(passages, args.index, args.model, args.device)
    else:
        backend = BM25Retriever(passages)
    handler = make_handler(backend, args.backend, read_timeout_s=args.read_timeout)
    server = make_server(args.host, args.port, handler, backlog=args.backlog)
    print(f"{args.backend} over {len(passages)} passages: http://{args.host}:{args.port}/retrieve", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
