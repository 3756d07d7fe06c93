"""The search task's data (trgrpo/tasks/search_data.py): the generated corpus, the retrievers, the QA loaders."""

import json

import pytest

from trgrpo.tasks import search as S
from trgrpo.tasks import search_data
from trgrpo.tasks.search_data import load_qa, make_corpus


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(0)


def test_corpus_is_deterministic_by_seed():
    a, b, c = make_corpus(3), make_corpus(3), make_corpus(4)
    assert a.fingerprint() == b.fingerprint() and a.passages == b.passages and a.questions == b.questions
    assert a.fingerprint() != c.fingerprint()
    types = {q["type"] for q in a.questions["test"]}
    assert types == {"one-hop", "two-hop", "comparison"}
    passage = {p["id"]: p for p in a.passages}
    for q in a.questions["test"] + a.questions["train"]:  # the answer is written in the gold passages
        gold_text = " ".join(passage[pid]["title"] + " " + passage[pid]["text"] for pid in q["gold_ids"])
        assert q["answers"][0] in gold_text
    # test questions are about people and organisations no train question names
    train_text = " ".join(q["question"] for q in a.questions["train"])
    for q in a.questions["test"]:
        if q["type"] == "one-hop":
            assert passage[q["gold_ids"][0]]["title"] not in train_text


def test_bm25_finds_the_gold_passage_of_one_hop_questions(corpus):
    retriever = search_data.make_retriever("bm25", corpus.passages)
    one_hop = [q for q in corpus.questions["test"] if q["type"] == "one-hop"]
    r1 = search_data.recall_at_k(retriever, one_hop, k=1)
    print(f"BM25 recall@1 on {len(one_hop)} generated one-hop questions (question text as query): {r1:.3f}")
    assert r1 >= 0.9


def test_dense_retriever_with_a_stand_in_encoder(corpus, tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    monkeypatch.setenv("TRGRPO_CACHE", str(tmp_path))
    import numpy as np

    def bag_of_words(texts):  # a deterministic stand-in for MiniLM (fast, offline)
        out = np.zeros((len(texts), 512), dtype="float32")
        for i, t in enumerate(texts):
            for w in S.normalize_answer(t).split():
                out[i, sum(map(ord, w)) * 2654435761 % 512] += 1.0
        return out

    dense = search_data.DenseRetriever(corpus.passages, encoder=bag_of_words, encoder_name="bow")
    assert dense.embeddings_path.exists()
    one_hop = [q for q in corpus.questions["test"] if q["type"] == "one-hop"]
    assert search_data.recall_at_k(dense, one_hop, k=3) >= 0.8
    encoded = []
    counting = lambda texts: encoded.extend(texts) or bag_of_words(texts)  # noqa: E731
    again = search_data.DenseRetriever(corpus.passages, encoder=counting, encoder_name="bow")
    assert encoded == []  # passage embeddings came from the disk cache
    assert again.search(one_hop[0]["queries"][0], 1)[0]["id"] == one_hop[0]["gold_ids"][0]


def test_qa_loaders_read_search_r1_and_flashrag_files(tmp_path, monkeypatch):
    import pandas as pd

    rows = [{"id": "1", "question": "who wrote x?", "golden_answers": ["Ann", "Anne"], "metadata": {}}]
    (tmp_path / "nq").mkdir()
    (tmp_path / "nq" / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    recs = load_qa("nq", path=tmp_path)
    assert recs[0]["answers"] == ["Ann", "Anne"] and recs[0]["type"] == "nq"
    merged = pd.DataFrame(
        [
            {"question": "q1", "data_source": "hotpotqa", "reward_model": {"ground_truth": {"target": ["a"]}}},
            {"question": "q2", "data_source": "bamboogle", "reward_model": {"ground_truth": {"target": ["b"]}}},
        ]
    )
    merged.to_parquet(tmp_path / "test.parquet")
    assert [r["answers"] for r in load_qa("bamboogle", path=tmp_path / "test.parquet")] == [["b"]]
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="offline|OFFLINE"):
        load_qa("popqa")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_qa("squad", path=tmp_path)


def _flaky_server(answers: list):
    """A server on 127.0.0.1 that answers its n-th request by ``answers[n]``: "reset" (closes the socket unanswered),
    an HTTP status with a one-line error, or "ok" (one passage per query)."""
    import socket
    import struct
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            what = answers[min(len(seen), len(answers) - 1)]
            seen.append(what)
            if what == "reset":  # RST, not FIN: what a full listen queue or a crashed server gives
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            status = 200 if what == "ok" else what
            hits = [[{"document": {"id": "0", "contents": f'"T"\n{q}'}, "score": 1.0}] for q in body["queries"]]
            out = json.dumps({"result": hits} if status == 200 else {"error": "one line"}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/retrieve", seen


@pytest.mark.parametrize(
    ("answers", "tries", "error"),
    [
        (["reset", 503, "ok"], 3, None),  # reset and 5xx: tried again, then answered
        ([400], 1, 'HTTP 400: {"error": "one line"}'),  # a 4xx is the request's fault: not tried again
        ([503], 3, 'HTTP 503: {"error": "one line"} after 3 tries'),  # retries=2: three tries, then one line
    ],
)
def test_the_client_tries_a_failed_request_again_with_backoff(answers, tries, error):
    """Issue 48 item 8: ServerRetriever had no retry, so a reset under load became a failed search."""
    import time

    from trgrpo.tasks.search_data import ServerRetriever

    httpd, url, seen = _flaky_server(answers)
    client = ServerRetriever(url, timeout=5, retries=2, backoff_s=0.05)
    t0 = time.monotonic()
    try:
        if error is None:
            assert client.batch_search(["a", "b"], 1)[1][0]["text"] == "b"
        else:
            with pytest.raises(ConnectionError) as err:
                client.batch_search(["a"], 1)
            assert str(err.value) == f"retrieval server {url}: {error}"
    finally:
        httpd.shutdown()
    assert len(seen) == client.requests == tries and client.retried == tries - 1
    assert time.monotonic() - t0 >= 0.05 * (2 ** (tries - 1) - 1)  # 0.05 s, then 0.1 s apart
