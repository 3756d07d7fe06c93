"""K&K reward and loaders you can rely on (issue "trust", findings 6 and 8): characters that hide a role word,
Unicode white space as Logic-RL's str regex reads it, solution_text_format read strictly."""

from __future__ import annotations

import json
import re

import pytest

from trgrpo.tasks import kk, kk_puzzles


def shell(answer: str) -> str:
    return f"<think>Let me see.</think><answer>{answer}</answer>"


HIDERS = {
    "variation selector U+FE0F": "\ufe0f",
    "tag letter U+E0041": "\U000e0041",
    "tag space U+E0020": "\U000e0020",
    "Hangul filler U+3164": "\u3164",
    "halfwidth Hangul filler U+FFA0": "\uffa0",
    "Braille blank U+2800": "\u2800",
    "combining acute U+0301": "\u0301",
    "combining ring U+030A": "\u030a",
    "Mongolian vowel separator U+180E": "\u180e",
    "variation selector-17 U+E0100": "\U000e0100",
}


@pytest.mark.parametrize("hider", list(HIDERS.values()), ids=list(HIDERS))
def test_a_hidden_second_role_is_not_scored(hider):
    """The answer "Zoey is a kn?ave. Zoey is a knight." states two roles; the count sees one. It scored 3.0."""
    hedge = f"Zoey is a kn{hider}ave. Zoey is a knight."
    assert kk_puzzles.kk_reward(shell(hedge), ["Zoey"], [True]) == -1.0  # format ok, answer unparseable
    assert kk_puzzles.kk_reward(shell("Zoey is a knight."), ["Zoey"], [True]) == 3.0


def logic_rl_parse(answer: str, names: list[str]) -> dict[str, bool] | None:
    """Logic-RL's parser on a str (its regex: \\s is Unicode white space)."""
    text = answer.lower()
    if text.count("knight") + text.count("knave") != len(names):
        return None
    out = {}
    for name in names:
        m = re.search(rf"\b{re.escape(name.lower())}\b\s+is\s+a\s+\b(knight|knave)\b", text)
        if m is None:
            return None
        out[name] = m.group(1) == "knight"
    return out


@pytest.mark.parametrize(
    "space", ["\u00a0", "\u2003", "\u3000", "\u202f", "\u2009", "\u1680", "\u205f", "\x85", "\x1f", " \u00a0 "]
)
def test_unicode_white_space_reads_as_logic_rl_reads_it(space):
    answer = f"(1) Zoey is{space}a knight\n(2) Oliver{space}is a{space}knave"
    names = ["Zoey", "Oliver"]
    assert logic_rl_parse(answer, names) == {"Zoey": True, "Oliver": False}
    assert kk_puzzles.parse_kk_answer(answer, names) == {"Zoey": True, "Oliver": False}
    assert kk_puzzles.kk_reward(shell(answer), names, [True, False]) == 3.0


def test_zero_width_space_is_still_refused():
    # U+200B is not white space for Logic-RL either, and it can hide inside a word
    answer = "(1) Zoey is\u200ba knight"
    assert logic_rl_parse(answer, ["Zoey"]) is None and kk_puzzles.parse_kk_answer(answer, ["Zoey"]) is None


# --------------------------------------------------------------------------------------------------
# Rows with only solution_text_format
# --------------------------------------------------------------------------------------------------


def row(fmt: str) -> dict:
    return {"quiz": "A very special island is inhabited only by knights and knaves. ...", "solution_text_format": fmt}


def test_solution_text_format_keeps_names_with_spaces():
    rec = kk.normalize_kk_row(row("(1) Mary Ann is a knight\n(2) Bob is a knave"))
    assert rec["names"] == ["Mary Ann", "Bob"] and rec["solution"] == [True, False]


@pytest.mark.parametrize(
    "fmt", ["The knight is Bob", "(1) The knight is Bob\n(2) Ann is a knave", "Zoey is a knight and Bob a knave", ""]
)
def test_solution_text_format_that_is_not_logic_rl_is_an_error(fmt, tmp_path):
    path = tmp_path / "kk.jsonl"
    path.write_text(json.dumps(row("(1) Ann is a knight")) + "\n" + json.dumps(row(fmt)) + "\n")
    with pytest.raises(ValueError, match=r"kk\.jsonl: row 1: .*solution_text_format"):
        kk.load_kk_files(path)
