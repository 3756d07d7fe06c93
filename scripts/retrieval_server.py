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
import sys
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


def make_handler(backend, name: str):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/health":
                return self._send(404, {"error": "GET /health or POST /retrieve"})
            self._send(200, {"status": "ok", "backend": name, "passages": len(backend.passages)})

        def do_POST(self):  # noqa: N802
            if self.path != "/retrieve":
                return self._send(404, {"error": "POST /retrieve"})
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                queries, k = [str(q) for q in req["queries"]], int(req.get("topk") or 3)
            except (ValueError, KeyError, TypeError) as e:
                return self._send(400, {"error": f"expected {{'queries': [...], 'topk': k}}: {e}"})
            hits = backend.batch_search(queries, k) if queries else []
            docs = [[{"id": h["id"], "contents": f'"{h["title"]}"\n{h["text"]}'} for h in row] for row in hits]
            if req.get("return_scores"):
                rows = [[{"document": d, "score": h["score"]} for d, h in zip(ds, row)] for ds, row in zip(docs, hits)]
                return self._send(200, {"result": rows})
            self._send(200, {"result": docs})

        def log_message(self, *args) -> None:  # quiet: one line per request would flood a training log
            pass

    return Handler


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
    args = ap.parse_args(argv)
    from trgrpo.tasks.search_data import BM25Retriever, make_corpus

    if args.corpus is not None and not Path(args.corpus).is_file():
        ap.error(f"--corpus {args.corpus}: no such file")
    passages = read_corpus(args.corpus) if args.corpus else make_corpus(args.corpus_seed).passages
    if args.backend == "e5":
        if not args.corpus or not args.index:
            ap.error("--backend e5 needs --corpus (JSONL) and --index (its FAISS index)")
        backend = E5Index(passages, args.index, args.model, args.device)
    else:
        backend = BM25Retriever(passages)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(backend, args.backend))
    print(f"{args.backend} over {len(passages)} passages: http://{args.host}:{args.port}/retrieve", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
