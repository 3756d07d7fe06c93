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
