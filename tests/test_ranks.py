"""What several processes change (issue "scale" defects 5, 10): rollouts drawn from the run's seed on every path,
and the clip-ratio extremes taken over every process's completions."""

from __future__ import annotations

import types
from collections import defaultdict

import pytest
import torch

from trgrpo.loss import METRIC_KEYS
from trgrpo.runs.experiment import run
from trgrpo.tasks import Task, register_task
from trgrpo.trainer import TRGRPOTrainer
from trgrpo.weights import WeightParams

from .test_experiment import _build, _evaluate, spec

DRAWN: list = []


def _recording_reward(completions, completion_ids, **kwargs):
    DRAWN.append([list(ids) for ids in completion_ids])
    return [float(sum(ids) % 5) for ids in completion_ids]


register_task("unit-seeded", Task(_build, lambda spec: [_recording_reward], _evaluate))


def rollouts(model, seed, tmp_path, **kw):
    DRAWN.clear()
    s = spec(model, f"seed{seed}", task="unit-seeded", seed=seed, steps=1, n_eval=0, **kw)
    run(s, results_dir=tmp_path / "res", checkpoint_dir=tmp_path / "ckpt", resume=False, verbose=False)
    return [row for batch in DRAWN for row in batch]


@pytest.mark.slow  # three runs: about 25 s on 2 cores
def test_two_seeds_draw_different_rollouts_one_seed_the_same(tiny_model_dir, tmp_path):
    """HF generate: the rollouts of seed 3 twice are the same, seed 4's differ."""
    a, b, c = (rollouts(tiny_model_dir, seed, tmp_path / str(i)) for i, seed in enumerate((3, 3, 4)))
    assert a and a == b and a != c


def test_vllm_engine_seeded_by_rank_does_not_decide_the_rollouts(tiny_model_dir, tmp_path, monkeypatch):
    """Colocated vLLM: TRL builds the engine with ``seed=process_index``, which seeds the process's RNG (the one
    vLLM samples from) with the rank, whatever the run's seed (defect 5). A stand-in engine does just that; after
    the trainer is built the RNG is the run's again: seeds 3 and 4 draw apart, 3 twice the same."""
    import trl.trainer.grpo_trainer as grpo

    class RankSeededEngine:
        def __init__(self, accelerator, **kw):
            torch.manual_seed(accelerator.process_index)  # what LLM(seed=process_index) does to the process

    monkeypatch.setattr(grpo, "VLLMGeneration", RankSeededEngine)
    monkeypatch.setattr(grpo, "is_vllm_available", lambda *a, **k: True, raising=False)
    from trgrpo.runs.experiment import build_trainer
    from trgrpo.tasks import get_task

    draws = []
    for seed in (3, 3, 4):
        s = spec(tiny_model_dir, f"v{seed}", task="unit-seeded", seed=seed, steps=1, n_eval=0, use_vllm=True)
        trainer = build_trainer(s, get_task("unit-seeded"), tmp_path / f"v{len(draws)}", verbose=False)[0]
        assert isinstance(trainer.vllm_generation, RankSeededEngine)
        draws.append(torch.rand(4).tolist())
    assert draws[0] == draws[1] and draws[0] != draws[2]


def test_clip_ratio_extremes_are_taken_over_every_process():
    """Defect 10: ``clip_ratio/low_min`` and ``high_max`` over the completions of both processes (as TRL gathers
    them), not over the first process's rows of a gathered (2, B) tensor."""
    peer = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])  # the other process: no low clip, all high clipped

    class TwoRanks:
        device = torch.device("cpu")

        def reduce(self, t, reduction="sum"):
            return t

        def gather(self, t):
            return torch.cat([t, peer if t.shape == peer.shape else t])

    fake = types.SimpleNamespace(
        _metrics=defaultdict(lambda: defaultdict(list)),
        accelerator=TwoRanks(),
        beta=0.0,
        epsilon_low=0.2,
        epsilon_high=0.28,
        args=types.SimpleNamespace(use_bias_correction_kl=False, weight_params=WeightParams()),
    )
    old = torch.zeros(3, 2)
    logps = torch.log(torch.tensor([[0.5, 1.0]] * 3))  # ratio 0.5 on one token of two, negative advantage: low
    inputs = {"advantages": -torch.ones(3)}
    mask = torch.ones(3, 2)
    metrics = dict.fromkeys(METRIC_KEYS, 0.0)
    TRGRPOTrainer._log_tr_metrics(fake, "train", metrics, logps, old, inputs, mask, torch.zeros(3, 2), mask * 0.5)
    store = fake._metrics["train"]
    assert store["clip_ratio/low_min"] == [0.0] and store["clip_ratio/high_max"] == [pytest.approx(1.0)]
