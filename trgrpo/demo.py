"""A short TR-GRPO training on the embedded model (2-person K&K, ``<think>`` pre-filled): log + summary."""

from __future__ import annotations

import sys


def main() -> int:
    import torch

    from .experiment import RunSpec, run

    torch.set_num_threads(max(1, torch.get_num_threads()))
    spec = RunSpec(
        task="kk",
        model="embedded",
        scheme="tr",
        steps=2,
        prompts_per_step=2,
        num_generations=4,
        max_completion_length=64,
        learning_rate=1e-6,
        n_train=16,
        n_eval=4,
        save_steps=1000,
        task_options={"n_people": 2, "eval_n_people": 2, "prefill_think": True},
        group="demo",
    )
    rec = run(spec, keep_checkpoints=False)
    last = rec["history"][-1]
    print(
        f"demo: {len(rec['history'])} TR-GRPO steps on {rec['model']}, reward {last.get('reward', float('nan')):.3f}, "
        f"mean weight {last.get('tr/weight_mean', float('nan')):.3f}, {rec['seconds_per_step']:.1f} s/step, "
        f"eval accuracy {rec['final'].get('accuracy', float('nan')):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
