"""TRGRPOTrainer with mask_truncated_completions=True (issue "trust", finding 4): a micro-batch whose completions are
all truncated gives TRL's own result (loss 0, no update) instead of stopping the run."""

from __future__ import annotations

import pytest
from datasets import Dataset
from transformers import AutoTokenizer

from trgrpo import TRGRPOConfig, TRGRPOTrainer

from .test_trainer import PROMPTS, common, ids_reward


def run(trainer_cls, config_cls, tmp_path, model_dir, **kw):
    tok = AutoTokenizer.from_pretrained(model_dir)
    never_end = sorted({t for t in (tok.eos_token_id, tok.pad_token_id) if t is not None})
    config = config_cls(
        **common(tmp_path, max_steps=2, max_completion_length=3),
        mask_truncated_completions=True,
        generation_kwargs={"suppress_tokens": never_end},  # every completion runs into the length limit
        **kw,
    )
    trainer = trainer_cls(
        model=model_dir, reward_funcs=ids_reward, args=config, train_dataset=Dataset.from_dict({"prompt": PROMPTS})
    )
    trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def test_all_truncated_micro_batch_matches_trl(tiny_model_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    ours = run(TRGRPOTrainer, TRGRPOConfig, tmp_path / "ours", tiny_model_dir, weight_scheme="tr")
    theirs = run(GRPOTrainer, GRPOConfig, tmp_path / "trl", tiny_model_dir)
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert a["completions/clipped_ratio"] == b["completions/clipped_ratio"] == 1.0
        assert a["loss"] == b["loss"] == 0.0
        assert a["grad_norm"] == pytest.approx(b["grad_norm"]) and a["grad_norm"] == 0.0
        assert a["tr/weight_mean"] == 0.0  # no valid token: the diagnostics log zeros, as TRL's own metrics do


def test_weight_rng_file_is_per_process_under_several_processes():
    from types import SimpleNamespace

    from trgrpo.trainer import weight_rng_file

    assert weight_rng_file(SimpleNamespace(world_size=1, process_index=0)) == "trgrpo_weight_rng.pt"
    names = {weight_rng_file(SimpleNamespace(world_size=4, process_index=r)) for r in range(4)}
    assert len(names) == 4 and "trgrpo_weight_rng_3.pt" in names
