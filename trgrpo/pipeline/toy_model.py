"""The toy's model: a word-level tokenizer (every digit, ``+``, ``=``, ``;`` one token; canonical text puts a space
between tokens, so ``decode(encode(x)) == x``) and a ~1M-parameter Qwen2 from a config (4 layers x 128 hidden),
plus the toy's RL hyperparameters (:data:`TOY_DEFAULTS`, Table 6 where it applies)."""

from __future__ import annotations

from typing import Any

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SYMBOLS = ["+", "=", ";"]
VOCAB = [PAD, EOS, UNK, *[str(d) for d in range(10)], *SYMBOLS]

# The micro model: ~1.0M parameters (4 layers x 128 hidden, tied embeddings).
MICRO_CONFIG = dict(
    hidden_size=128,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=64,
)

# RL hyperparameters of the toy (Table 6 where it applies: G = 8, eps 0.2/0.24, beta 0.001 with k3;
# lr 1e-4 instead of 1e-6 because the model is 1M parameters and the run is 150 steps).
TOY_DEFAULTS = dict(
    steps=100,
    prompts_per_step=8,
    num_generations=8,
    learning_rate=1e-4,
    temperature=1.0,
    n_train=2000,
    n_eval=400,
    beta=0.001,
    epsilon=0.2,
    epsilon_high=0.24,
)


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and model


def build_tokenizer() -> Any:
    """A word-level ``PreTrainedTokenizerFast`` over :data:`VOCAB` (digits split one token each)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        model_max_length=MICRO_CONFIG["max_position_embeddings"],
    )
    fast.padding_side = "left"
    return fast


def build_model(tokenizer: Any, *, seed: int = 0, **overrides: Any) -> Any:
    """A randomly initialised Qwen2 of :data:`MICRO_CONFIG` size for ``tokenizer``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **{**MICRO_CONFIG, **overrides},
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def n_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
