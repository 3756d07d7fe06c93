"""Data files (issue "trust", finding 8): every error names the file (and the row); empty data is an error unless
asked for; a UTF-8 byte-order mark is fine."""

from __future__ import annotations

import gzip
import json

import pytest

from trgrpo.tasks import kk, search_data
from trgrpo.tasks import math as mt
from trgrpo.tasks.rows import read_table

MATH_ROW = {"problem": "1+1?", "answer": "2"}
KK_ROW = {"quiz": "Knights and knaves ...", "names": ["Ann", "Bob"], "solution": [True, False]}
QA_ROW = {"question": "Who?", "golden_answers": ["Ann"]}

LOADERS = {
    "math": (lambda p, **kw: mt.load_math_file(p, **kw), MATH_ROW),
    "kk": (lambda p, **kw: kk.load_kk_files(p, **kw), KK_ROW),
    "search": (lambda p, **kw: search_data.load_searchr1_train(p, **kw), QA_ROW),
}


def jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def bad_files(row: dict) -> dict[str, tuple[str, bytes, str]]:
    """name -> (file name, content, what the error must say besides the path)."""
    good = jsonl([row]).encode()
    return {
        "latin-1": ("d.jsonl", good[:-2] + b' "caf\xe9"}\n', "not UTF-8"),
        "utf-16": ("d.jsonl", jsonl([row]).encode("utf-16"), "not UTF-8"),
        "utf-32": ("d.json", json.dumps([row]).encode("utf-32"), "not UTF-8"),
        "gzip": ("d.jsonl", gzip.compress(good), "not UTF-8"),
        "null json": ("d.json", b"null", "list of rows"),
        "number json": ("d.json", b"42", "list of rows"),
        "broken json": ("d.json", b'[{"a": 1}', "not valid JSON"),
        "broken jsonl line 2": ("d.jsonl", good + b"{oops\n", "d.jsonl:2"),
        "empty jsonl": ("d.jsonl", b"", "no rows"),
        "blank jsonl": ("d.jsonl", b"\n\n  \n", "no rows"),
        "empty json": ("d.json", b"", "no rows"),
        "empty json list": ("d.json", b"[]", "no rows"),
        "not parquet": ("d.parquet", b"PAR1 not really", "parquet"),
    }


CASES = [(kind, name) for kind in LOADERS for name in bad_files(MATH_ROW)]


@pytest.mark.parametrize("kind, name", CASES, ids=[f"{k}-{n}" for k, n in CASES])
def test_bad_files_raise_an_error_naming_the_file(tmp_path, kind, name):
    load, row = LOADERS[kind]
    fname, content, says = bad_files(row)[name]
    path = tmp_path / fname
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        load(path)
    assert str(path) in str(err.value) and says in str(err.value), str(err.value)


@pytest.mark.parametrize("kind", list(LOADERS))
def test_bom_prefixed_utf8_is_read(tmp_path, kind):
    load, row = LOADERS[kind]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + jsonl([row]).encode())
    assert len(load(path)) == 1
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([row]).encode())
    assert len(load(path)) == 1


@pytest.mark.parametrize("kind", list(LOADERS))
def test_empty_data_only_when_asked_for(tmp_path, kind):
    load, _ = LOADERS[kind]
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(ValueError, match="no rows"):
        load(path)
    assert load(path, allow_empty=True) == []


def test_zero_row_parquet_is_an_error_unless_asked_for(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "none.parquet"
    pd.DataFrame({"problem": pd.Series([], dtype=str), "answer": pd.Series([], dtype=str)}).to_parquet(path)
    with pytest.raises(ValueError, match=r"none\.parquet: the file holds no rows"):
        mt.load_math_file(path)
    assert mt.load_math_file(path, allow_empty=True) == []
    assert read_table(path, allow_empty=True) == []


def test_row_errors_name_file_and_row(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text(jsonl([QA_ROW, {"question": "no answer"}]))
    with pytest.raises(ValueError, match=r"qa\.jsonl: row 1"):
        search_data.load_searchr1_train(path)
    path.write_text(jsonl([QA_ROW, [1, 2]]))
    with pytest.raises(ValueError, match=r"qa\.jsonl: row 1"):
        search_data.load_searchr1_train(path)


def test_kk_size_filter_that_keeps_nothing_is_an_error(tmp_path):
    path = tmp_path / "kk.jsonl"
    path.write_text(jsonl([KK_ROW]))
    assert len(kk.load_kk_files(path, n_people=2)) == 1
    with pytest.raises(ValueError, match=r"kk\.jsonl: no puzzle with n_people"):
        kk.load_kk_files(path, n_people=5)
    assert kk.load_kk_files(path, n_people=5, allow_empty=True) == []
