"""The retrieval server as its own process (scripts/retrieval_server.py), speaking Search-R1's /retrieve protocol."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse

import pytest

from trgrpo.runs import fullscale
from trgrpo.tasks import search_data
from trgrpo.tasks.search_data import ServerRetriever, make_corpus


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(0)


@pytest.fixture(scope="module")
def server_url():
    """scripts/retrieval_server.py on a free port of 127.0.0.1 (BM25 over the generated corpus, reads bounded to 1 s),
    stopped afterwards."""
    with fullscale.retrieval_server("--corpus-seed", "0", "--read-timeout", "1", wait_s=60) as url:
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


def _post(url: str, body: bytes, headers: dict | None = None, timeout: float = 10.0) -> tuple[int, dict]:
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", u.path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"queries": ["x"], "topk": 1e400}', "'topk' must be an integer from 1 to 1000, got Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
        (b'{"queries": ["x"], "topk": 10' + b"0" * 5000 + b"}", "not JSON"),
        (b'{"queries": ["x"], "topk": "3"}', "'topk' must be an integer"),
        (b'{"queries": ["x"], "topk": true}', "'topk' must be an integer"),
        (b'{"queries": ["x"], "topk": 0}', "'topk' must be an integer"),
        (b'{"queries": "who wrote hamlet"}', "'queries' must be a list of strings"),
        (b'{"queries": [1, 2]}', "'queries' must be a list of strings"),
        (b'{"topk": 3}', "'queries' must be a list of strings"),
        (b'{"queries": ["x"], "return_scores": "yes"}', "'return_scores' must be true or false"),
        (b'["x"]', "must be a JSON object"),
        (b"\xff\xfe not utf-8", "not JSON"),
        (b"", "not JSON"),
    ],
)
def test_every_bad_body_gets_a_400_with_one_line(server_url, body, says):
    """Issue 48 item 8: ``topk: 1e400`` and JSON nested 10^5 deep closed the connection with no answer (an uncaught
    OverflowError / RecursionError in the handler); every bad body is a 400 whose ``error`` is one line."""
    status, answer = _post(server_url, body)
    assert status == 400 and says in answer["error"] and "\n" not in answer["error"]
    assert _post(server_url, b'{"queries": ["x"], "topk": 1}')[0] == 200  # and the server goes on


def test_a_bad_content_length_gets_a_400(server_url):
    for length in ("-1", "many", str(1 << 40)):
        status, answer = _post(server_url, b"{}", headers={"Content-Length": length})
        assert status == 400 and "Content-Length" in answer["error"]


def test_a_body_shorter_than_its_content_length_is_answered_after_the_read_timeout(server_url):
    """Issue 48 item 8: a Content-Length larger than the body held a handler thread forever; the read is bounded
    (``--read-timeout``, 1 s here) and answered 400, while other requests are served meanwhile."""
    u = urllib.parse.urlsplit(server_url)
    with socket.create_connection((u.hostname, u.port), timeout=8) as sock:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"queries": ')
        t0 = time.monotonic()
        assert _post(server_url, b'{"queries": ["x"], "topk": 1}')[0] == 200  # not blocked by the stalled one
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 400") and b"shorter than its Content-Length 100" in answer
    assert 0.5 < time.monotonic() - t0 < 5


def test_fifty_concurrent_clients_lose_nothing_without_retries(server_url, corpus):
    """Issue 48 item 8: with the stdlib's listen backlog of 5, 50 clients at once lost requests to connection resets.
    200 clients, no retry, all released at once: every one answered, the same hits as one by one."""
    n, pool = 200, [q["question"] for q in corpus.questions["test"]]
    queries = [pool[i % len(pool)] for i in range(n)]
    before = _health(server_url)["requests"]
    expected = ServerRetriever(server_url, timeout=30, retries=0).batch_search(queries, 2)
    start, results, errors = threading.Barrier(n), [None] * n, []

    def one(i):
        start.wait()
        try:
            results[i] = ServerRetriever(server_url, timeout=30, retries=0).search(queries[i], 2)
        except ConnectionError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and time.monotonic() - t0 < 30
    assert [[h["id"] for h in r] for r in results] == [[h["id"] for h in r] for r in expected]
    health = _health(server_url)
    assert health["requests"] - before == n + 1 and health["errors"] == 0


def _health(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url.replace("/retrieve", "/health"), timeout=10) as resp:
        return json.loads(resp.read())


def test_the_server_refuses_a_bad_backlog_or_timeout_in_one_line(capsys):
    from scripts.retrieval_server import main

    for argv, says in ((["--backlog", "0"], "--backlog 0"), (["--read-timeout", "nan"], "--read-timeout nan")):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_the_corpus_file_is_read_in_place_not_into_dicts(tmp_path, capsys):
    """Issue 45 defect 1: the server held the corpus as Python dicts (~25-35 GB for wiki-18); now two int64 offsets a
    passage over the memory-mapped file, each passage parsed when a hit needs it."""
    from scripts.retrieval_server import main
    from trgrpo.tasks.search_data import CorpusFile

    rows = [{"id": "7", "contents": '"Hamlet"\nA tragedy.'}, {"contents": '"Paris"\nThe capital.\nOf France.'}]
    path = tmp_path / "wiki.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]))  # a blank line, no final newline
    corpus = CorpusFile(str(path))
    assert len(corpus) == 2 and corpus.starts.dtype == corpus.ends.dtype == "int64"
    assert corpus[0] == {"id": "7", "title": "Hamlet", "text": "A tragedy."}
    assert corpus[1] == {"id": "1", "title": "Paris", "text": "The capital.\nOf France."}
    assert [p["title"] for p in corpus] == ["Hamlet", "Paris"]  # iterates (BM25 over a file indexes every passage)
    (tmp_path / "bad.jsonl").write_text("id,contents\n1,x\n")
    with pytest.raises(SystemExit) as exit_:
        main(["--corpus", str(tmp_path / "bad.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and "not Search-R1's JSONL" in err[-1] and "bad.jsonl" in err[-1]
