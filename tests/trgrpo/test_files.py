"""Result writers (issue "trust", finding 9): atomic writes with unique temporary names and fsync, batch summaries
written atomically."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from trgrpo import files
from trgrpo.files import write_json


def test_two_writers_never_share_a_temporary_file(tmp_path, monkeypatch):
    """The old writer used the fixed name <file>.json.tmp: two writers interleaved on it."""
    seen: list[str] = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(str(src))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    target = tmp_path / "r.json"
    barrier = threading.Barrier(4)

    def write(i):
        barrier.wait()
        for k in range(10):
            write_json(target, {"writer": i, "k": k, "pad": "x" * 20000})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 40 and len(set(seen)) == 40  # a unique temporary file per write
    assert json.loads(target.read_text())["k"] == 9
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # nothing left behind


def test_write_is_flushed_to_disk_before_the_rename(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_json(tmp_path / "a.json", {"x": 1})
    assert events[:2] == ["fsync", "replace"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    write_json(target, {"v": 1})
    with pytest.raises(TypeError):
        write_json(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_batch_summary_is_written_atomically(tmp_path, monkeypatch):
    from trgrpo.runs import batch

    calls: list[Path] = []
    real = files.write_json
    monkeypatch.setattr(batch, "write_json", lambda path, rec: (calls.append(Path(path)), real(path, rec))[1])
    monkeypatch.setattr(
        batch,
        "run_notebook",
        lambda nb, out_dir, smoke, parameters: dict(notebook=nb.name, smoke=smoke, ok=True, seconds=0.1, error=""),
    )
    rows = batch.run_notebooks([(Path("01_x.ipynb"), True, {})], tmp_path)
    assert calls == [tmp_path / "summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text()) == rows
