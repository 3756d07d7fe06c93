"""Shared fixtures: a tiny random model in a temporary folder (TRL reloads it for the reference model)."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    import torch

    from trgrpo.models import tiny_model

    torch.set_num_threads(2)
    return tiny_model(tmp_path_factory.mktemp("tiny-llama"), hidden=32, layers=2, heads=2, seed=0)
