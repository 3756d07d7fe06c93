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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


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
    from trgrpo.tasks.search_data import BM25Retriever, CorpusFile, make_corpus, make_handler, make_server

    if args.backlog < 1:
        ap.error(f"--backlog {args.backlog}: must be >= 1")
    if not 0 < args.read_timeout < float("inf"):
        ap.error(f"--read-timeout {args.read_timeout}: must be a number of seconds > 0")
    if args.corpus is not None and not Path(args.corpus).is_file():
        ap.error(f"--corpus {args.corpus}: no such file")
    passages = CorpusFile(args.corpus) if args.corpus else make_corpus(args.corpus_seed).passages
    if not len(passages):
        ap.error(f"--corpus {args.corpus}: no passages")
    try:  # its first and last lines parse: a file of another kind is refused before any index is read
        passages[0], passages[len(passages) - 1]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        ap.error(f"--corpus {args.corpus}: not Search-R1's JSONL of {{'id', 'contents'}} ({type(e).__name__}: {e})")
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
