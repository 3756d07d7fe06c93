"""The retrieval server as its own process (scripts/retrieval_server.py), speaking Search-R1's /retrieve protocol."""

from __future__ import annotations

import json

import pytest

from trgrpo.runs import fullscale
from trgrpo.tasks import search_data
from trgrpo.tasks.search_data import ServerRetriever, make_corpus


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(0)


@pytest.fixture(scope="module")
def server_url():
    """scripts/retrieval_server.py on a free port of 127.0.0.1 (BM25 over the generated corpus), stopped afterwards."""
    with fullscale.retrieval_server("--corpus-seed", "0", wait_s=60) as url:
        yield url


def test_the_server_answers_search_r1s_protocol_with_the_local_bm25_hits(server_url, corpus):
    queries = [q["question"] for q in corpus.questions["test"][:5]]
    served = ServerRetriever(server_url, timeout=10).batch_search(queries, 3)
    local = search_data.BM25Retriever(corpus.passages).batch_search(queries, 3)
    assert [[(h["id"], h["title"], h["text"]) for h in row] for row in served] == [
        [(h["id"], h["title"], h["text"]) for h in row] for row in local
    ]
    assert [h["score"] for h in served[0]] == pytest.approx([h["score"] for h in local[0]])
    raw = json.dumps({"queries": [queries[0]], "topk": 1}).encode()  # return_scores false: documents only
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(server_url, data=raw), timeout=10) as resp:
        (row,) = json.loads(resp.read())["result"]
    assert set(row[0]) == {"id", "contents"} and row[0]["contents"].startswith('"')


@pytest.mark.slow
def test_the_server_reads_a_search_r1_corpus_file(tmp_path):
    """``--corpus FILE``: Search-R1's JSONL (``{"id", "contents": '"Title"\\ntext'}``), served in the same protocol."""
    rows = [
        {"id": "0", "contents": '"Hamlet"\nHamlet is a tragedy written by William Shakespeare.'},
        {"id": "1", "contents": '"Paris"\nParis is the capital of France.'},
    ]
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with fullscale.retrieval_server("--corpus", str(corpus)) as url:
        (hits,) = ServerRetriever(url, timeout=10).batch_search(["who wrote hamlet"], 1)
    assert hits[0]["id"] == "0" and hits[0]["title"] == "Hamlet" and hits[0]["text"].startswith("Hamlet is")
