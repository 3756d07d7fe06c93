"""Knights & Knaves task: Table 5 reward rule by rule, data, loaders, prompt, evaluation (App. B.1.1, Table 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from trgrpo import paper
from trgrpo.files import ROOT
from trgrpo.runs.fullscale import specs_from_parameters
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks import get_task, kk, kk_puzzles

NAMES = ["Emma", "Liam", "Olivia"]
SOLUTION = [True, False, False]
GOLD_ANSWER = "(1) Emma is a knight\n(2) Liam is a knave\n(3) Olivia is a knave"


def completion(answer: str = GOLD_ANSWER, think: str = "Emma tells the truth, so ...") -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def reward(text, **kw):
    return kk_puzzles.kk_reward(text, NAMES, SOLUTION, **kw)


def parts(text, **kw):
    return kk_puzzles.kk_reward_parts(text, NAMES, SOLUTION, **kw)


# --------------------------------------------------------------------------------------------------
# Table 5, one rule per test
# --------------------------------------------------------------------------------------------------


def test_reward_values_are_table5_sums():
    assert kk_puzzles.KK_REWARD_VALUES == {3.0, -0.5, -1.0, -3.0}


def test_gold_answer_scores_the_maximum():
    assert parts(completion()) == (1.0, 2.0)
    assert reward(completion()) == 3.0


def test_gold_solution_text_of_a_record_scores_the_maximum():
    record = kk_puzzles.make_record("quiz", NAMES, SOLUTION)
    assert record["solution_text"] == GOLD_ANSWER
    assert reward(completion(record["solution_text"])) == 3.0


def test_answer_lines_in_any_order_and_any_case_are_correct():
    shuffled = "(1) Olivia is a knave\n(2) EMMA IS A KNIGHT\n(3) liam is a knave"
    assert reward(completion(shuffled)) == 3.0


def test_answer_on_one_line_is_correct():
    assert reward(completion("Emma is a knight, Liam is a knave, and Olivia is a knave.")) == 3.0


@pytest.mark.parametrize("tag", kk_puzzles.TAGS)
def test_missing_tag_fails_format(tag):
    text = completion().replace(tag, "", 1)
    assert parts(text) == (-1.0, -2.0)
    assert reward(text) == -3.0


@pytest.mark.parametrize("tag", kk_puzzles.TAGS)
def test_duplicated_tag_fails_format(tag):
    text = completion() + "\n" + tag
    assert parts(text) == (-1.0, -2.0)


def test_tag_mentioned_inside_thinking_counts_as_duplicate():
    text = completion(think="I will write <answer> later")
    assert reward(text) == -3.0


@pytest.mark.parametrize(
    "text",
    [
        f"<answer>{GOLD_ANSWER}</answer><think>x</think>",  # answer before think
        f"</think>x<think><answer>{GOLD_ANSWER}</answer>",  # think closed before opened
        f"<think>x</think></answer>{GOLD_ANSWER}<answer>",  # answer closed before opened
        f"<think>x<answer>{GOLD_ANSWER}</answer></think>",  # answer inside think
    ],
)
def test_wrong_tag_order_fails_format(text):
    assert parts(text) == (-1.0, -2.0)


def test_wrong_identity_scores_minus_1_5():
    wrong = GOLD_ANSWER.replace("Liam is a knave", "Liam is a knight")
    assert parts(completion(wrong)) == (1.0, -1.5)
    assert reward(completion(wrong)) == -0.5


def test_all_identities_flipped_scores_minus_1_5():
    flipped = "(1) Emma is a knave\n(2) Liam is a knight\n(3) Olivia is a knight"
    assert parts(completion(flipped)) == (1.0, -1.5)


def test_missing_name_is_unparseable():
    missing = "(1) Emma is a knight\n(2) Liam is a knave"
    assert parts(completion(missing)) == (1.0, -2.0)
    assert reward(completion(missing)) == -1.0


def test_extra_knight_mention_is_unparseable():
    extra = GOLD_ANSWER + "\nso there is exactly one knight"
    assert parts(completion(extra)) == (1.0, -2.0)


def test_name_without_is_a_role_is_unparseable():
    # three role mentions (the count matches) but Olivia is never "Olivia is a knight/knave"
    bad = "(1) Emma is a knight\n(2) Liam is a knave\n(3) Olivia: knave"
    assert parts(completion(bad)) == (1.0, -2.0)


def test_name_must_stand_alone_as_a_word():
    # Logic-RL's \bName\b: "xEmma" and "Emmanuel" are not Emma
    for other in ("xEmma", "Emmanuel", "Emma_"):
        text = GOLD_ANSWER.replace("Emma", other)
        assert parts(completion(text)) == (1.0, -2.0), other
    assert parts(completion(GOLD_ANSWER.replace("(1) Emma", "(1)Emma"))) == (1.0, 2.0)


def test_first_statement_of_a_name_counts():
    # a name stated twice: the first "Name is a ..." is the answer (but the count of roles must still match)
    text = "Emma is a knave, Emma is a knight, Liam is a knave"
    assert kk_puzzles.parse_kk_answer(text, ["Emma", "Liam"]) is None  # three roles for two people
    assert kk_puzzles.parse_kk_answer("Emma is a knave and Liam is a knight", ["Emma", "Liam"]) == {
        "Emma": False,
        "Liam": True,
    }


# A disguised second role (regression). Before the guard, each answer below scored the full 3.0 although it names
# both roles for Emma: the disguised "knave" is not counted (the count stays 3 for 3 people) and the first plain
# "Emma is a knight" is read as her answer. Now it is unparseable: format +1, answer -2.
DISGUISED_KNAVE = {
    "fullwidth": "\uff4b\uff4e\uff41\uff56\uff45",  # ｋｎａｖｅ
    "math bold": "\U0001d424\U0001d427\U0001d41a\U0001d42f\U0001d41e",  # 𝐤𝐧𝐚𝐯𝐞
    "cyrillic a and e": "kn\u0430v\u0435",  # knаvе
    "greek nu": "kna\u03bde",
    "zero-width space": "kn\u200bave",
    "soft hyphen": "kna\u00adve",
    "circled": "\u24da\u24dd\u24d0\u24e5\u24d4",  # ⓚⓝⓐⓥⓔ
}


@pytest.mark.parametrize("kind", sorted(DISGUISED_KNAVE))
def test_disguised_second_role_is_unparseable(kind):
    hedge = f"Emma is a {DISGUISED_KNAVE[kind]}. {GOLD_ANSWER}"
    assert kk_puzzles.disguised_letters(hedge)
    assert kk_puzzles.parse_kk_answer(hedge, NAMES) is None
    assert parts(completion(hedge)) == (1.0, -2.0)
    assert reward(completion(hedge)) == -1.0  # was 3.0
    assert parts(completion(GOLD_ANSWER)) == (1.0, 2.0)  # the plain answer still scores the maximum


def test_kelvin_sign_reads_as_k_like_logic_rl():
    # Logic-RL lower()s the answer, and "\u212a".lower() == "k": a Kelvin-sign "knight" is a mention there too.
    kelvin = GOLD_ANSWER.replace("Emma is a knight", "Emma is a \u212anight")
    assert parts(completion(kelvin)) == (1.0, 2.0)
    hedge = "Emma is a \u212anave. " + GOLD_ANSWER  # 4 mentions for 3 people, as in Logic-RL
    assert parts(completion(hedge)) == (1.0, -2.0)


@pytest.mark.parametrize(
    "extra", ["\u2014 all checked \u2714", " (caf\u00e9, na\u00efve: \U0001f4a5)", "\u00a0", " \u0130"]
)
def test_ordinary_non_ascii_text_in_the_answer_is_fine(extra):
    assert not kk_puzzles.disguised_letters(GOLD_ANSWER + extra)
    assert parts(completion(GOLD_ANSWER + extra)) == (1.0, 2.0)


# The astral part of the guard runs only when the answer's UTF-8 bytes hold a first byte (F0/F3) and a second byte
# (9D/9F/A0) of an astral disguise (a memchr each): other astral characters are cheap to wave through.
ASTRAL_JUNK = "\U0001114b"  # F0 91 85 8B: astral, yet no second byte of a disguise


def test_byte_gate_lets_every_astral_disguise_through():
    leads, seconds = kk_puzzles._disguise()[2:]
    for lo, hi in kk_puzzles._disguise_sets()[1]:
        for cp in range(lo, hi + 1):
            enc = chr(cp).encode()
            assert enc[:1] in leads and enc[1:2] in seconds, hex(cp)
            text = f"{ASTRAL_JUNK}Emma is a kn{chr(cp)}ave"
            assert kk_puzzles.disguised_letters(text) and kk_puzzles.disguised_letters(text, text.encode()), hex(cp)
    # the one tag character U+E0041 behind a BMP-only prefix: found through the gate, also at the very end
    assert kk_puzzles.disguised_letters("\u0130" * 1000 + "kn\U000e0041ave")
    assert parts(completion(f"Emma is a kn\U000e0041ave. {GOLD_ANSWER}")) == (1.0, -2.0)


@pytest.mark.parametrize(
    "junk", [ASTRAL_JUNK, "\U0001f4a5", "\U0001d7ff", "\U000e01f0", "\U0001d3ff", "\U0001f146", "\U0010ffff", "\ud835"]
)
def test_byte_gate_agrees_with_the_full_scan(junk):
    bmp, astral = kk_puzzles._disguise()[:2]
    for text in (junk * 50 + GOLD_ANSWER, GOLD_ANSWER + junk, f"{junk}\u0130{junk} {GOLD_ANSWER}"):
        full = bmp.search(text) is not None or astral.search(text) is not None
        assert (
            kk_puzzles.disguised_letters(text)
            is full
            is kk_puzzles.disguised_letters(text, text.encode("utf-8", "surrogatepass"))
        )
        assert not full  # none of these is a disguise
        assert parts(completion(text)) == (1.0, 2.0)


def test_a_hedge_in_words_is_not_seen():
    """Known limit of the paper's pattern reward, kept as it is: a hedge in plain words adds no knight/knave
    mention, so "..., or vice versa" is graded on the assignment it states first."""
    hedge = "Emma is a knight, Liam is a knave and Olivia is a knave, or vice versa"
    assert parts(completion(hedge)) == (1.0, 2.0)


def test_wrong_name_is_unparseable():
    bad = GOLD_ANSWER.replace("Olivia", "Oliver")
    assert parts(completion(bad)) == (1.0, -2.0)


def test_empty_answer_is_unparseable():
    assert parts(completion("   ")) == (1.0, -2.0)


def test_prefilled_think_completion_without_opening_tag_is_well_formed():
    text = completion()[len("<think>") :]
    assert parts(text, prefilled_think=True) == (1.0, 2.0)
    # the same text without the pre-fill misses <think>
    assert parts(text) == (-1.0, -2.0)


def test_prefilled_think_completion_that_reopens_think_fails_format():
    assert parts(completion(), prefilled_think=True) == (-1.0, -2.0)


@pytest.mark.parametrize("tag", kk_puzzles.TAGS[1:])
def test_prefilled_think_missing_or_duplicated_tag_fails_format(tag):
    text = completion()[len("<think>") :]
    assert parts(text.replace(tag, "", 1), prefilled_think=True) == (-1.0, -2.0)
    assert parts(text + tag, prefilled_think=True) == (-1.0, -2.0)


def test_prefilled_think_wrong_order_fails_format():
    text = f"x<answer>{GOLD_ANSWER}</answer></think>"
    assert parts(text, prefilled_think=True) == (-1.0, -2.0)


def test_prefilled_think_wrong_answer_scores_minus_1_5():
    text = completion(GOLD_ANSWER.replace("Emma is a knight", "Emma is a knave"))[len("<think>") :]
    assert parts(text, prefilled_think=True) == (1.0, -1.5)


@pytest.mark.parametrize("bad", [None, 3, b"<think>", ["<think>"], {"content": "x"}])
def test_non_string_completion_scores_the_minimum(bad):
    assert parts(bad) == (-1.0, -2.0)
    assert reward(bad) == -3.0


def test_gold_may_be_knight_knave_strings_or_numpy_bools():
    np = pytest.importorskip("numpy")
    assert kk_puzzles.kk_reward(completion(), np.array(NAMES), np.array(SOLUTION)) == 3.0
    assert kk_puzzles.kk_reward(completion(), NAMES, ["knight", "knave", "knave"]) == 3.0


@pytest.mark.parametrize(
    "names, solution",
    [(["Emma"], [True, False]), ([], []), (["Emma", "Emma"], [True, True]), (["Emma"], ["maybe"]), ("Emma", [True])],
)
def test_malformed_gold_raises_clear_error(names, solution):
    with pytest.raises((ValueError, TypeError)):
        kk_puzzles.kk_reward(completion(), names, solution)


# --------------------------------------------------------------------------------------------------
# TRL adapter
# --------------------------------------------------------------------------------------------------


def test_trl_reward_funcs_score_both_completion_kinds():
    fmt_fn, ans_fn = kk.make_kk_reward_funcs()
    assert (fmt_fn.__name__, ans_fn.__name__) == ("kk_format_reward", "kk_answer_reward")
    texts = [completion(), completion(GOLD_ANSWER.replace("knave", "knight", 1)), "no tags", None]
    kwargs = dict(names=[NAMES] * 4, solution=[SOLUTION] * 4, trainer_state=None, log_extra=None, log_metric=None)
    for comps in (texts, [[{"role": "assistant", "content": t}] for t in texts]):
        f = fmt_fn(prompts=[[]] * 4, completions=comps, completion_ids=None, **kwargs)
        a = ans_fn(prompts=[[]] * 4, completions=comps, completion_ids=None, **kwargs)
        assert f == [1.0, 1.0, -1.0, -1.0]
        assert a == [2.0, -1.5, -2.0, -2.0]
        assert [x + y for x, y in zip(f, a)] == [reward(t) for t in texts]


def test_trl_reward_funcs_prefilled():
    fmt_fn, ans_fn = kk.make_kk_reward_funcs(prefilled_think=True)
    text = completion()[len("<think>") :]
    kwargs = dict(names=[NAMES], solution=[SOLUTION])
    assert fmt_fn(None, [text], **kwargs) == [1.0] and ans_fn(None, [text], **kwargs) == [2.0]


def test_trl_reward_funcs_need_the_dataset_columns():
    fmt_fn, _ = kk.make_kk_reward_funcs()
    with pytest.raises(KeyError, match="names"):
        fmt_fn(None, [completion()])
    with pytest.raises(ValueError, match="same length"):
        fmt_fn(None, [completion()], names=[NAMES, NAMES], solution=[SOLUTION, SOLUTION])


# --------------------------------------------------------------------------------------------------
# Data: generator and splits
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated():
    return kk_puzzles.generate_kk(10, seed=0)


def test_generated_records_have_the_normalised_fields(generated):
    assert [r["n_people"] for r in generated] == [3, 4, 5, 6, 7] * 2
    for r in generated:
        assert set(r) == {"quiz", "names", "solution", "n_people", "solution_text"}
        assert len(r["names"]) == len(r["solution"]) == r["n_people"]
        assert all(isinstance(x, bool) for x in r["solution"]) and all(isinstance(n, str) for n in r["names"])
        assert r["quiz"].startswith("A very special island is inhabited only by knights and knaves.")
        assert r["quiz"].endswith("So who is a knight and who is a knave?")
        assert "Format your answer" not in r["quiz"]
        assert all(name in r["quiz"] for name in r["names"])
        assert r["solution_text"] == kk_puzzles.solution_text(r["names"], r["solution"])
        # the gold answer scores the maximum
        assert kk_puzzles.kk_reward(completion(r["solution_text"]), r["names"], r["solution"]) == 3.0


def test_generated_puzzles_have_the_stated_unique_solution(generated):
    """Re-derive each solution by brute force from reasoning-gym's statements (same random stream)."""
    import random

    from reasoning_gym.logic.knights_knaves import KKProblemSampler, KnightsKnavesDataset

    counters: dict[int, int] = {}
    for r in generated[:5]:
        k = r["n_people"]
        rng = random.Random(f"trgrpo-kk/gen/0/{k}/{counters.get(k, 0)}")
        counters[k] = counters.get(k, 0) + 1
        sampler = KKProblemSampler(rand_seed=rng.randint(0, 2**32), n_people=k)
        statements = sampler.sample_valid_problems(1)[0]["statements"]
        assert KnightsKnavesDataset.find_solution(statements) == [tuple(r["solution"])]


def test_generation_is_deterministic_by_seed(generated):
    assert kk_puzzles.generate_kk(10, seed=0) == generated
    other = kk_puzzles.generate_kk(10, seed=1)
    assert [r["quiz"] for r in other] != [r["quiz"] for r in generated]


def test_generation_single_size_and_distinct():
    recs = kk_puzzles.generate_kk(12, n_people=2, seed=3)
    assert {r["n_people"] for r in recs} == {2}
    assert len({r["quiz"] for r in recs}) == 12


@pytest.mark.parametrize("bad", [1, 8, (), (3, 9), "3", True])
def test_generation_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        kk_puzzles.generate_kk(2, n_people=bad)


def test_streams_are_deterministic_and_distinct():
    train = kk_puzzles.generate_kk(6, n_people=(2, 3), stream="train")
    assert train == kk_puzzles.generate_kk(6, n_people=(2, 3), stream="train") and len({r["quiz"] for r in train}) == 6
    assert kk_puzzles.generate_kk(6, n_people=(2, 3), stream="test") != train


# --------------------------------------------------------------------------------------------------
# Loaders (Logic-RL / K-and-K schema)
# --------------------------------------------------------------------------------------------------

KK_ROWS = [
    {
        "quiz": "A very special island ... Zoey said that Oliver is a knight. So who is a knight and who is a knave?",
        "names": ["Zoey", "Oliver"],
        "knight_knave": {"knight": "knight", "knave": "knave"},
        "solution": [True, True],
        "solution_text": "Zoey is a knight, and Oliver is a knight.",
        "solution_text_format": "(1) Zoey is a knight\n(2) Oliver is a knight",
        "cot_head": "Let's think step by step.",
        "statements": "(('telling-truth', 1), ('telling-truth', 0))",
        "index": 0,
    },
    {
        "quiz": "A very special island ... three people: Ava, Jack and Mia ...",
        "names": ["Ava", "Jack", "Mia"],
        "solution": [False, True, False],
        "solution_text_format": "(1) Ava is a knave\n(2) Jack is a knight\n(3) Mia is a knave",
        "index": 1,
    },
]


def _expected(row):
    return kk_puzzles.make_record(row["quiz"], row["names"], row["solution"])


def test_load_parquet_in_logic_rl_schema(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "test.parquet"
    pd.DataFrame(KK_ROWS).to_parquet(path)
    records = kk.load_kk_files(path)
    assert records == [_expected(r) for r in KK_ROWS]
    assert all(isinstance(x, bool) for r in records for x in r["solution"])
    assert kk.load_kk_files(path, n_people=3) == [_expected(KK_ROWS[1])]
    assert kk.load_kk_files(path, n_people=[2, 8]) == [_expected(KK_ROWS[0])]


def test_load_jsonl_in_logic_rl_schema(tmp_path):
    path = tmp_path / "3ppl.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in KK_ROWS) + "\n")
    assert kk.load_kk_files(path) == [_expected(r) for r in KK_ROWS]


def test_load_without_names_uses_solution_text_format(tmp_path):
    path = tmp_path / "kk.jsonl"
    rows = [{"quiz": r["quiz"], "solution_text_format": r["solution_text_format"]} for r in KK_ROWS]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert kk.load_kk_files(path) == [_expected(r) for r in KK_ROWS]


def test_load_logic_rl_verl_parquet(tmp_path):
    pd = pytest.importorskip("pandas")
    row = KK_ROWS[1]
    rendered = (
        "<|im_start|>system\nYou are a helpful assistant. ...<|im_end|>\n<|im_start|>user\n"
        f"{row['quiz']}\n<|im_end|>\n<|im_start|>assistant\n<think>"
    )
    verl = {
        "data_source": "kk_logic",
        "prompt": [{"role": "user", "content": rendered}],
        "ability": "logic",
        "reward_model": {"style": "rule", "ground_truth": {"solution_text_format": row["solution_text_format"]}},
        "extra_info": {"split": "test", "index": 0},
    }
    path = tmp_path / "verl.parquet"
    pd.DataFrame([verl]).to_parquet(path)
    assert kk.load_kk_files(path) == [_expected(row)]


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError):
        kk.load_kk_files(tmp_path / "missing.parquet")
    bad_ext = tmp_path / "kk.csv"
    bad_ext.write_text("quiz\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        kk.load_kk_files(bad_ext)
    no_gold = tmp_path / "no_gold.jsonl"
    no_gold.write_text(json.dumps({"quiz": "q"}))
    with pytest.raises(ValueError, match="row 0"):
        kk.load_kk_files(no_gold)
    not_a_dict = tmp_path / "list.json"
    not_a_dict.write_text(json.dumps([["quiz", "names"]]))
    with pytest.raises(ValueError, match="row 0: a K&K row is a dict"):
        kk.load_kk_files(not_a_dict)
    disagree = tmp_path / "disagree.jsonl"
    disagree.write_text(json.dumps({**KK_ROWS[0], "solution": [True, False]}))
    with pytest.raises(ValueError, match="disagrees"):
        kk.load_kk_files(disagree)


# --------------------------------------------------------------------------------------------------
# Prompt and dataset
# --------------------------------------------------------------------------------------------------


def test_prompt_is_logic_rl_instruct_messages(generated):
    msgs = kk_puzzles.kk_prompt(generated[0])
    assert [m["role"] for m in msgs] == ["system", "user"]
    system = msgs[0]["content"]
    for needle in ("<think> </think>", "<answer> </answer>", "<answer> (1) Zoey is a knight\n(2) ... </answer>."):
        assert needle in system
    assert msgs[1]["content"] == generated[0]["quiz"] + "\n"  # Logic-RL's rows end each turn with a newline
    pre = kk_puzzles.kk_prompt(generated[0], prefill_think=True)
    assert pre[:2] == msgs and pre[2] == {"role": "assistant", "content": "<think>"}


def test_dataset_columns_for_trl(generated):
    ds = kk.kk_dataset(generated[:4], prefill_think=True)
    assert set(ds.column_names) == {"prompt", "names", "solution", "n_people"}
    assert ds[0]["names"] == generated[0]["names"] and ds[0]["solution"] == generated[0]["solution"]
    assert ds[0]["prompt"][-1] == {"role": "assistant", "content": "<think>"}
    # TRL's is_conversational: a list of {"role", "content"} dicts
    assert all(set(m) == {"role", "content"} for m in ds[0]["prompt"])
    assert ds["n_people"] == [3, 4, 5, 6]


def test_dataset_rendered_with_a_tokenizer_continues_the_prefill(generated, tiny_lm):
    _, tok = tiny_lm
    ds = kk.kk_dataset(generated[:2], prefill_think=True, tokenizer=tok)
    assert isinstance(ds[0]["prompt"], str) and ds[0]["prompt"].endswith("<|im_start|>assistant\n<think>")


# --------------------------------------------------------------------------------------------------
# Evaluation (Table 1 layout)
# --------------------------------------------------------------------------------------------------


def build_tiny_lm(seed: int = 0):
    """A tiny random Qwen2 and a byte-level BPE tokenizer trained offline on a few strings."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|pad|>", "<|eos|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(
        ["<think> knights and knaves </think> <answer> (1) Emma is a knight </answer>"] * 4, trainer
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<|pad|>", eos_token="<|eos|>")
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg), tok


@pytest.fixture(scope="module")
def tiny_lm():
    return build_tiny_lm()


def test_accuracy_of_gold_answers_is_one(monkeypatch, generated):
    def fake_generate(model, tokenizer, prompts, *, batch_size, max_new_tokens):
        assert len(prompts) == len(generated) and batch_size == 3
        by_quiz = {r["quiz"] + "\n": r for r in generated}
        return [completion(by_quiz[p[1]["content"]]["solution_text"]) for p in prompts]

    monkeypatch.setattr(kk, "greedy_generate", fake_generate)
    res = kk.evaluate_kk(None, None, generated, batch_size=3)
    assert res["by_n_people"] == {3: 1.0, 4: 1.0, 5: 1.0, 6: 1.0, 7: 1.0}
    assert res["avg"] == 1.0 and res["overall"] == 1.0 and res["format_rate"] == 1.0 and res["n"] == 10


def test_accuracy_layout_by_number_of_people():
    recs = [kk_puzzles.make_record("q3a", NAMES, SOLUTION), kk_puzzles.make_record("q3b", NAMES, SOLUTION)]
    recs += [kk_puzzles.make_record(f"q2{i}", ["Ava", "Jack"], [False, True]) for i in range(4)]
    good3, good2 = completion(), completion("(1) Ava is a knave\n(2) Jack is a knight")
    comps = [good3, "no tags", good2, completion("(1) Ava is a knight\n(2) Jack is a knight"), "x", "y"]
    res = kk.kk_accuracy(comps, recs)
    assert res["by_n_people"] == {2: 0.25, 3: 0.5}
    assert list(res["by_n_people"]) == [2, 3]
    assert res["avg"] == pytest.approx(0.375)  # Table 1's Avg.: the mean over sizes
    assert res["overall"] == pytest.approx(2 / 6)
    assert res["format_rate"] == pytest.approx(3 / 6)
    assert res["n_by_n_people"] == {2: 4, 3: 2}
    with pytest.raises(ValueError):
        kk.kk_accuracy(comps[:2], recs)


@pytest.mark.parametrize("prefill", [False, True])
def test_evaluate_with_a_tiny_model(tiny_lm, generated, prefill):
    model, tok = tiny_lm
    res = kk.evaluate_kk(model, tok, generated[:5], batch_size=2, max_new_tokens=4, prefill_think=prefill)
    assert set(res["by_n_people"]) == {3, 4, 5, 6, 7}
    assert all(0.0 <= v <= 1.0 for v in res["by_n_people"].values())
    assert 0.0 <= res["avg"] <= 1.0 and res["n"] == 5 and res["accuracy"] == res["avg"]


def test_kk_options_are_what_the_task_reads():
    """The task reads its validated options: absent options are the model's defaults (eval sizes follow n_people,
    no files: the generator), so each default is written once."""
    o = kk.KKOptions(n_people=3)
    assert (o.n_people, o.eval_n_people, o.train_path, o.prefill_think) == (3, 3, "", False)
    assert kk.KKOptions().eval_n_people == paper.KK_PEOPLE and o.eval_batch() == {}
    assert kk.KKOptions(eval_batch_size=4).eval_batch() == {"batch_size": 4}


# From test_trust_kk.py: K&K reward and loaders you can rely on (issue "trust", findings 6 and 8): characters that
# hide a role word, Unicode white space as Logic-RL's str regex reads it, solution_text_format read strictly.


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


QUIZ3 = "A very special island is inhabited only by knights and knaves. You meet 3 inhabitants: Zoey, Oliver, and Ava."


QUIZ4 = "A very special island is inhabited only by knights and knaves. You meet 4 inhabitants: Zoey, Max, Eli, Liam."


GOLD3 = "(1) Zoey is a knight\n(2) Oliver is a knave\n(3) Ava is a knight"


GOLD4 = "(1) Zoey is a knave\n(2) Max is a knave\n(3) Eli is a knight\n(4) Liam is a knight"


# The system prompt inside Logic-RL's K&K parquet rows (its data, typed out here independently of the library).
LOGIC_RL_SYSTEM = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then provides "
    "the user with the answer. The reasoning process and answer are enclosed within <think> </think> and<answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>.  Now "
    "the user asks you to solve a logical reasoning problem. After thinking, when you finally reach a conclusion, "
    "clearly state the identity of each character within <answer> </answer> tags. i.e., <answer> (1) Zoey is a "
    "knight\n(2) ... </answer>."
)


def logic_rl_row(quiz: str, gold: str, index: int) -> dict:
    """A row as Logic-RL's verl preprocessing writes it: the rendered prompt, the gold in the reward model."""
    content = (
        f"<|im_start|>system\n{LOGIC_RL_SYSTEM}\n<|im_end|>\n<|im_start|>user\n{quiz}\n<|im_end|>\n"
        "<|im_start|>assistant\n<think>"
    )
    return {
        "data_source": "kk_logic",
        "prompt": [{"role": "user", "content": content}],
        "ability": "logic",
        "reward_model": {"style": "rule", "ground_truth": {"solution_text_format": gold, "statements": "[]"}},
        "extra_info": {"split": "test", "index": index},
    }


@pytest.fixture
def logic_rl_parquet(tmp_path):
    rows = [logic_rl_row(QUIZ3 + f" #{i}", GOLD3, i) for i in range(3)]
    rows += [logic_rl_row(QUIZ4 + f" #{i}", GOLD4, 3 + i) for i in range(3)]
    path = tmp_path / "test_new.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_logic_rl_parquet_rows_load(logic_rl_parquet):
    records = kk.load_kk_files(logic_rl_parquet)
    assert len(records) == 6
    assert records[0]["quiz"] == QUIZ3 + " #0"  # taken out of the rendered user turn
    assert records[0]["names"] == ["Zoey", "Oliver", "Ava"]
    assert records[0]["solution"] == [True, False, True]
    assert records[3]["solution"] == [False, False, True, True]


def test_the_prompt_reproduces_the_logic_rl_rows_exactly(logic_rl_parquet, tiny_model_dir):
    """Issue 24, item 7: the system prompt and turn layout of the paper's data, under a ChatML template (Qwen2.5's)."""
    from transformers import AutoTokenizer

    rows = pd.read_parquet(logic_rl_parquet).to_dict("records")
    records = kk.load_kk_files(logic_rl_parquet)
    ds = kk.kk_dataset(records, prefill_think=True, tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir))
    assert [p for p in ds["prompt"]] == [r["prompt"][0]["content"] for r in rows]
    assert kk_puzzles.KK_SYSTEM_PROMPT == LOGIC_RL_SYSTEM


def test_raw_kk_schema_parquet_loads(tmp_path):
    path = tmp_path / "train.parquet"
    row = {"quiz": QUIZ3, "names": ["Zoey", "Oliver", "Ava"], "solution": [True, False, True]}
    pd.DataFrame([{**row, "solution_text_format": GOLD3}]).to_parquet(path)
    (record,) = kk.load_kk_files([path])
    assert record["solution_text"] == GOLD3 and record["n_people"] == 3


def test_a_cut_keeps_every_size(logic_rl_parquet):
    records = kk.load_kk_files(logic_rl_parquet, n=4)
    assert [r["n_people"] for r in records] == [3, 4, 3, 4]
    assert [r["n_people"] for r in kk.load_kk_files(logic_rl_parquet, n_people=[4])] == [4, 4, 4]


def test_missing_path_names_the_file(tmp_path):
    missing = tmp_path / "nowhere" / "test_new.parquet"
    with pytest.raises(FileNotFoundError, match="nowhere/test_new.parquet"):
        kk.load_kk_files(missing)
    spec = RunSpec(task="kk", model="embedded", n_train=2, n_eval=2, task_options={"eval_path": str(missing)})
    with pytest.raises(FileNotFoundError, match=r"nowhere/test_new\.parquet"):
        get_task("kk").build(spec, None)


def test_bad_column_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "test_new.parquet"
    pd.DataFrame([{"question": QUIZ3, "solution_text_format": GOLD3}]).to_parquet(path)
    with pytest.raises(ValueError, match=r"test_new\.parquet: row 0: .*needs a quiz"):
        kk.load_kk_files(path)
    pd.DataFrame([{"quiz": QUIZ3, "answer": "Zoey"}]).to_parquet(path)
    with pytest.raises(ValueError, match=r"test_new\.parquet: row 0: .*solution_text_format"):
        kk.load_kk_files(path)


def test_kk_build_reads_the_file_and_states_the_source(logic_rl_parquet, tmp_path):
    train_path = tmp_path / "train.parquet"
    pd.DataFrame([logic_rl_row(QUIZ3 + f" train {i}", GOLD3, i) for i in range(5)]).to_parquet(train_path)
    spec = RunSpec(
        task="kk",
        model="embedded",
        n_train=4,
        n_eval=4,
        task_options={"train_path": str(train_path), "eval_path": [str(logic_rl_parquet)], "n_people": [3, 4]},
    )
    task = get_task("kk")
    train_ds, test = task.build(spec, None)
    assert len(test) == 4 and {r["n_people"] for r in test} == {3, 4}
    source = task.data_source(spec, train_ds, test)
    assert source["eval"] == {
        "source": "logic-rl-file",
        "path": [str(logic_rl_parquet)],
        "split": ["test_new"],
        "size": 4,
    }
    assert source["train"]["source"] == "logic-rl-file" and source["train"]["size"] == len(train_ds) == 4
    assert source["train"]["split"] == ["train"]
    assert source["prefill_think"] is False


def test_kk_without_a_path_states_reasoning_gym():
    spec = RunSpec(task="kk", model="embedded", n_train=2, n_eval=2, task_options={"n_people": [3]})
    source = get_task("kk").data_source(spec, [0, 0], [0, 0])
    assert source["train"]["source"] == source["eval"]["source"] == "reasoning-gym"
    assert (source["train"]["split"], source["eval"]["split"], source["eval"]["size"]) == ("train", "test", 2)


def test_prefill_appears_in_the_prompt(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    record = kk_puzzles.make_record(QUIZ3, ["Zoey", "Oliver", "Ava"], [True, False, True])
    ds = kk.kk_dataset([record], prefill_think=True, tokenizer=tok)
    prompt = ds[0]["prompt"]
    assert isinstance(prompt, str) and prompt.rstrip().endswith("<think>")
    assert prompt.endswith("<|im_start|>assistant\n<think>")  # the assistant turn is open, not closed
    assert (
        prompt.count("<think>") == kk_puzzles.KK_SYSTEM_PROMPT.count("<think>") + 1
    )  # the system prompt names the tag
    plain = kk.kk_dataset([record], prefill_think=False, tokenizer=tok)[0]["prompt"]
    assert not plain.rstrip().endswith("<think>")


# The hub dataset's layout (K-and-K/knights-and-knaves): README configs "train" / "test", one split per size
# ("<n>ppl"), a jsonl file each, rows in the K-and-K schema. A local folder laid out so is what load_dataset reads.
HUB_README = """---
configs:
- config_name: train
  data_files:
  - split: 3ppl
    path: train/people3_num1000.jsonl
  - split: 4ppl
    path: train/people4_num1000.jsonl
- config_name: test
  data_files:
  - split: 3ppl
    path: test/people3_num100.jsonl
  - split: 4ppl
    path: test/people4_num100.jsonl
---
"""


def kk_hub_folder(root: Path) -> Path:
    import json

    root.mkdir()
    (root / "README.md").write_text(HUB_README)
    rows = {3: (QUIZ3, ["Zoey", "Oliver", "Ava"], [True, False, True], GOLD3)}
    rows[4] = (QUIZ4, ["Zoey", "Max", "Eli", "Liam"], [False, False, True, True], GOLD4)
    for config, count in (("train", 1000), ("test", 100)):
        (root / config).mkdir()
        for n, (quiz, names, solution, gold) in rows.items():
            lines = [
                {"quiz": f"{quiz} {config} #{i}", "names": names, "solution": solution, "solution_text_format": gold}
                for i in range(3)
            ]
            (root / config / f"people{n}_num{count}.jsonl").write_text("\n".join(map(json.dumps, lines)))
    return root


def test_kk_hub_data_loads_by_config_and_size_and_states_the_source(tmp_path):
    """The full-scale default (the paper's data from the hub) read through datasets, from a folder laid out as the
    hub dataset; the record names the hub source, reasoning-gym is a stated substitute."""
    source = f"hub:{kk_hub_folder(tmp_path / 'kk')}"
    spec = RunSpec(
        task="kk",
        model="embedded",
        n_train=4,
        n_eval=3,
        task_options={"train_path": source, "eval_path": source, "n_people": [3, 4]},
    )
    train_ds, test = get_task("kk").build(spec, None)
    assert [r["n_people"] for r in test] == [3, 4, 3] and all(" test #" in r["quiz"] for r in test)
    assert len(train_ds) == 4 and " train #0" in str(train_ds[0]["prompt"])
    got = get_task("kk").data_source(spec, train_ds, test)
    assert got["train"] == {
        "source": "hub",
        "repo": str(tmp_path / "kk"),
        "config": "train",
        "split": "train",
        "size": 4,
        "substitute": False,
    }
    assert got["eval"]["config"] == "test" and got["eval"]["size"] == 3
    fallback = kk.kk_source(kk.KK_GENERATED, "train", 2)
    assert fallback["source"] == "reasoning-gym" and fallback["substitute"] and "not the paper's" in fallback["note"]


def test_kk_hub_offline_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="reasoning-gym"):
        kk.load_kk_hub("hub:nobody-here/no-such-dataset", "train", n=2, n_people=[3])


def test_full_scale_kk_prefills_think_and_says_so():
    from trgrpo.notebook import parameter_defaults

    defaults = parameter_defaults(ROOT / "notebooks" / "05_kk_logic_full_scale.ipynb")
    specs = specs_from_parameters(
        "kk", {**defaults, "SEEDS": [0], "SCHEMES": ["tr"], "KK_EVAL_PATH": "data/kk/x.parquet"}
    )
    opts = specs[0].task_options
    assert opts["prefill_think"] is True and opts["eval_path"] == "data/kk/x.parquet"
    assert opts["train_path"] == kk.KK_PAPER_DATA == "hub:K-and-K/knights-and-knaves"  # the paper's data by default
    source = get_task("kk").data_source(specs[0], [0], [0])
    assert source["prefill_think"] is True
    params = {
        "MODEL": "m",
        "SCHEMES": ["tr"],
        "SEEDS": [0],
        "STEPS": 1,
        "PROMPTS_PER_STEP": 64,
        "GROUP_SIZE": 8,
        "MAX_COMPLETION_LENGTH": 16,
        "N_TRAIN": 8,
        "N_EVAL_PER_SIZE": 1,
        "KK_EVAL_PATH": "x/test_new.parquet",
    }  # notebook 05's parameters cell: the pre-fill is on unless PREFILL_THINK says otherwise
    (s,) = specs_from_parameters("kk", params, use_vllm=False)
    assert s.task_options["prefill_think"] is True and s.task_options["eval_path"] == "x/test_new.parquet"
    (s,) = specs_from_parameters("kk", {**params, "PREFILL_THINK": False}, use_vllm=False)
    assert s.task_options["prefill_think"] is False
    plan = yaml.safe_load((ROOT / "experiments" / "train_kk_qwen3b.yaml").read_text())
    assert plan["base"]["task_options"]["prefill_think"] is True  # Table 1's plan


def test_kk_data_parameters_take_a_source_or_files():
    from trgrpo.config import ConfigError
    from trgrpo.notebook import check_values as check_parameters

    defaults = {"KK_TRAIN_PATH": kk.KK_PAPER_DATA}
    for ok in (kk.KK_GENERATED, "data/kk/3ppl/train.parquet", ["a.parquet", "b.parquet"]):
        check_parameters({"KK_TRAIN_PATH": ok}, defaults, "plan.yaml")
    for bad in (5, "", [], [""]):
        with pytest.raises(ConfigError, match="plan.yaml: parameter KK_TRAIN_PATH"):
            check_parameters({"KK_TRAIN_PATH": bad}, defaults, "plan.yaml")
