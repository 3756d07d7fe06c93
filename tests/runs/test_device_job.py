"""trgrpo.runs.device_job: its per-step reseeding (the job as typed: tests/scripts/test_device_grid.py)."""

import torch

from trgrpo.runs import device_job


def test_every_step_is_reseeded_from_seed_and_step_alone():
    """Issue 46 section 3: the rollouts of step k of seed s are drawn after reseeding from (s, k) alone, so the two arms
    of a pair draw the same numbers whatever their RNG did before."""
    s = device_job.step_seed
    assert s(3, 7) == s(3, 7) and len({s(3, 7), s(3, 8), s(4, 7)}) == 3
    draws = []
    for _ in range(2):
        torch.rand(17)
        device_job.reseed_callback(3).on_step_begin(None, type("S", (), {"global_step": 5})(), None)
        draws.append(torch.rand(4))
    assert torch.equal(*draws)
