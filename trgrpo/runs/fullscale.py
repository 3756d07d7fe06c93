"""Full-scale runs (Section 4, Table 6): the run specs of notebooks 05 / 06 / 07, model shapes, :func:`launch`, and
notebook 07's local retrieval server process (:func:`retrieval_server`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from trgrpo import files, paper
from trgrpo.config import ConfigError
from trgrpo.files import RESULTS_DIR, ROOT, RUNS_DIR
from trgrpo.models import EMBEDDED_NAME
from trgrpo.runs import checkpoints, experiment
from trgrpo.runs.records import read_record, record_path, run_name
from trgrpo.runs.spec import RunSpec
from trgrpo.tasks.kk import KK_PAPER_DATA

# A model of at least this many parameters is a full-scale run: without CUDA it is refused, never trained on a CPU.
FULL_SCALE_PARAMS = 1e9


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs of a model: the values of its config.json."""

    layers: int  # num_hidden_layers
    hidden: int  # hidden_size
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    vocab: int  # vocab_size
    intermediate: int  # intermediate_size (gated MLP: gate, up, down)
    tied: bool  # tie_word_embeddings
    head_dim: int | None = None  # head_dim where config.json gives one, else hidden // heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def params(self) -> float:
        """Attention (q, o: hidden^2; k, v: hidden x kv_heads x head size), gated MLP and embeddings (tied: one
        matrix); norms and biases (< 0.1 %) left out."""
        h, kv = self.hidden, self.kv_heads * self.head_size
        layer = 2 * h * self.heads * self.head_size + 2 * h * kv + 3 * h * self.intermediate
        return float(self.layers * layer + self.embedding_params)

    @property
    def embedding_params(self) -> float:
        """The input embedding and the LM head (one matrix when tied)."""
        return float(self.vocab * self.hidden * (1 if self.tied else 2))

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 K and V of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_size * 2


# The config.json values of each model on the Hugging Face hub (<org>/<name>/config.json, read from the public
# files: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, vocab_size, intermediate_size,
# tie_word_embeddings). Table 9's models: Qwen2.5-3B (base), Mistral-7B-Instruct-v0.3, Llama-3.1-8B-Instruct.
_QWEN25_3B = ModelShape(36, 2048, 16, 2, 151936, 11008, True)  # Qwen/Qwen2.5-3B(-Instruct): 3.09B
_QWEN25_7B = ModelShape(28, 3584, 28, 4, 152064, 18944, False)  # Qwen/Qwen2.5-7B(-Instruct, -Instruct-1M): 7.62B
_SMOLLM2_135M = ModelShape(30, 576, 9, 3, 49152, 1536, True)  # HuggingFaceTB/SmolLM2-135M-Instruct: 0.13B
MODEL_SHAPES = {
    "Qwen2.5-0.5B-Instruct": ModelShape(24, 896, 14, 2, 151936, 4864, True),  # Qwen/: 0.49B
    "Qwen2.5-3B": _QWEN25_3B,
    "Qwen2.5-3B-Instruct": _QWEN25_3B,
    "Qwen2.5-7B": _QWEN25_7B,
    "Qwen2.5-7B-Instruct": _QWEN25_7B,
    "Qwen2.5-7B-Instruct-1M": _QWEN25_7B,
    "Mistral-7B-Instruct-v0.3": ModelShape(32, 4096, 32, 8, 32768, 14336, False),  # mistralai/: 7.25B
    "Llama-3.1-8B-Instruct": ModelShape(32, 4096, 32, 8, 128256, 14336, False),  # meta-llama/: 8.03B
    "embedded": _SMOLLM2_135M,  # the embedded model, by either name (trgrpo.models.resolve_model)
    EMBEDDED_NAME: _SMOLLM2_135M,
}


def model_shape(model: str) -> ModelShape:
    """The shape of a known model (by hub name or its last part), or of a local folder's config.json."""
    name = Path(str(model)).name
    if name in MODEL_SHAPES:
        return MODEL_SHAPES[name]
    cfg_path = Path(str(model)) / "config.json"
    if cfg_path.exists():
        c = json.loads(cfg_path.read_text())
        h, heads = c["hidden_size"], c["num_attention_heads"]
        return ModelShape(
            layers=c["num_hidden_layers"],
            hidden=h,
            heads=heads,
            kv_heads=c.get("num_key_value_heads", heads),
            vocab=c["vocab_size"],
            intermediate=c.get("intermediate_size", 4 * h),
            tied=bool(c.get("tie_word_embeddings")),
            head_dim=c.get("head_dim"),
        )
    raise ValueError(f"model {model!r}: unknown shape; known: {sorted(MODEL_SHAPES)} or a folder with config.json")


def short_model_name(model: str) -> str:
    return "embedded" if model in ("embedded", None) else Path(str(model)).name


# Optional notebook parameters (a None value also takes the default); the others are required.
PARAMETER_DEFAULTS = {
    "MICRO_BATCH_SIZE": 2,
    "GRADIENT_CHECKPOINTING": True,
    "VLLM_GPU_MEMORY": RunSpec.model_fields["vllm_gpu_memory_utilization"].default,  # the one default: RunSpec's
    "BF16": True,
    "REPORT_TO": "none",
    "SAVE_STEPS": 20,
    "TAUS": (),
    "RANGES": (),
    "PREFILL_THINK": True,
    "PLACEMENT": "ratio",
    "TAU_MODE": "scale",
    "TEMPERATURE": paper.TEMPERATURES["kk"],
    "SAMPLED_K": 16,
    "KK_TRAIN_PATH": KK_PAPER_DATA,  # the paper's K&K data (hub); "reasoning-gym": the stated offline fallback
    "KK_EVAL_PATH": KK_PAPER_DATA,
}
# Notebook 07's parameters named as an option of :class:`~trgrpo.tasks.search.SearchOptions` in upper case (absent:
# its default; RETRIEVER_URL: ``url``).
SEARCH_OPTION_PARAMETERS = ("corpus", "corpus_seed", "train_file", "data_dir", "retriever", "top_k", "template")
SEARCH_OPTION_PARAMETERS += ("max_tool_calls", "eval_every", "scale")


def specs_from_parameters(
    task: str,
    params: dict,
    *,
    use_vllm: bool | None = None,
    init_model: str | None = None,
    warm_start: dict | None = None,
) -> list[RunSpec]:
    """The runs of notebook 05 (``task="kk"``: Tables 1, 4, 7), 06 (``"math"``: Table 2, base model, temperature
    1.0) or 07 (``"search"``: Table 3, trained from ``init_model``, a warm start, default ``MODEL``; ``N_EVAL``
    counts per QA set with Search-R1's data, in total with the synthetic corpus) for the values of its parameters
    cell (upper-case names); the planner reads plans the same way. ``use_vllm`` None: ``USE_VLLM``'s."""
    p = {**PARAMETER_DEFAULTS, **{k: v for k, v in params.items() if v is not None}}
    model = p["MODEL"]
    common = dict(
        task=task,
        model=model,
        steps=p["STEPS"],
        prompts_per_step=p["PROMPTS_PER_STEP"],
        num_generations=p["NUM_GENERATIONS" if task == "search" else "GROUP_SIZE"],
        max_completion_length=p["MAX_COMPLETION_LENGTH"],
        max_eval_tokens=p.get("MAX_EVAL_TOKENS"),
        micro_batch_size=p["MICRO_BATCH_SIZE"],
        gradient_checkpointing=p["GRADIENT_CHECKPOINTING"],
        vllm_gpu_memory_utilization=float(p["VLLM_GPU_MEMORY"]),
        bf16=p["BF16"],
        report_to=p["REPORT_TO"],
        save_steps=p["SAVE_STEPS"],
        n_train=p["N_TRAIN"],
        use_vllm=bool(p.get("USE_VLLM")) if use_vllm is None else use_vllm,
        temperature=float(p["TEMPERATURE"]),
    )
    main = [(s, seed) for s in p["SCHEMES"] for seed in p["SEEDS"]]
    if task == "search":
        from trgrpo.tasks.search import SearchOptions
        from trgrpo.tasks.search_data import TABLE3_DATASETS

        defaults = SearchOptions().model_dump()
        options = {name: p.get(name.upper(), defaults[name]) for name in SEARCH_OPTION_PARAMETERS}
        options["url"] = p.get("RETRIEVER_URL", defaults["url"])
        options["warm_start"] = {k: v for k, v in (warm_start or {}).items() if k != "losses"} or None
        n_eval = p["N_EVAL"] * (len(TABLE3_DATASETS) if options["corpus"] == "searchr1" else 1)
        common.update(model=str(init_model or model), learning_rate=float(p["LEARNING_RATE"]), eval_before=True)
        common.update(n_eval=n_eval, task_options=options, group=f"search/{options['scale']}")
        return [RunSpec(**common, scheme=s, seed=seed, name=run_name(task, model, s, seed)) for s, seed in main]
    if task == "math":
        train = p["TRAIN"]
        options = {"train": train, "eval_sets": list(p["EVAL_SETS"]), "sampled_k": p["SAMPLED_K"]}
        common.update(n_eval=p["N_EVAL"], temperature=paper.TEMPERATURES["math"], task_options=options)
        group = f"math/{short_model_name(model)}/{Path(train).stem}"
        return [RunSpec(**common, scheme=s, seed=seed, group=group) for s, seed in main]
    people = list(paper.KK_PEOPLE)  # a list, as the spec's YAML writes it
    options = {"n_people": people, "eval_n_people": people, "prefill_think": bool(p["PREFILL_THINK"])}
    options.update(train_path=p["KK_TRAIN_PATH"], eval_path=p["KK_EVAL_PATH"])
    common.update(
        n_eval=p["N_EVAL_PER_SIZE"] * len(paper.KK_PEOPLE),
        placement=p["PLACEMENT"],
        tau_mode=p["TAU_MODE"],
        task_options=options,
    )
    group = f"kk/{short_model_name(model)}"
    runs = [(s, seed, {"group": f"{group}/main"}) for s, seed in main]
    runs += [("tr", seed, {"tau": float(t), "group": f"{group}/tau"}) for t in p["TAUS"] for seed in p["SEEDS"]]
    runs += [
        ("tr", seed, {"lower": float(lo), "upper": float(up), "group": f"{group}/range"})
        for lo, up in p["RANGES"]
        for seed in p["SEEDS"]
    ]
    return [RunSpec(**common, scheme=s, seed=seed, **kw) for s, seed, kw in runs]


NOTEBOOK_SPECS = {"05_": "kk", "06_": "math", "07_": "search"}  # notebook prefix -> the task of its full-scale runs


def n_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_missing() -> str | None:
    """None when torch sees a CUDA device; otherwise why not, in one line naming torch's CUDA and the driver."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"no CUDA device: torch {torch.__version__} is a CPU build (install vLLM's torch: environment.yml)"
    return (
        f"no CUDA device: torch {torch.__version__} is built for CUDA {torch.version.cuda} and sees no GPU; the NVIDIA "
        "driver must support that CUDA (vLLM 0.31's torch 2.13 is built for CUDA 13: driver >= 580; `nvidia-smi` "
        "prints the driver and the highest CUDA it supports): update the driver"
    )


def is_full_scale(model: str) -> bool:
    """A model of at least :data:`FULL_SCALE_PARAMS` parameters (the planner's shape), or one it does not know."""
    try:
        return model_shape(model).params >= FULL_SCALE_PARAMS
    except ValueError:  # a hub name the planner has no shape for: a full-scale model
        return True


def refuse_without_cuda(specs: list[RunSpec]) -> str | None:
    """One line when a full-scale run (:func:`is_full_scale`) would start without CUDA, before any model loads."""
    big = next((s for s in specs if is_full_scale(s.model)), None)
    if big is None or (problem := cuda_missing()) is None:
        return None
    return (
        f"{big.name}: {short_model_name(big.model)} is a full-scale model and {problem}; "
        "on a CPU run smoke mode instead: trgrpo batch experiments/smoke.yaml"
    )


def vllm_available() -> bool:
    import importlib.util

    return n_devices() > 0 and importlib.util.find_spec("vllm") is not None


def task_module(task: str) -> str | None:
    """The module that registers ``task`` (a child process imports it); None when it lives in ``__main__``."""
    from trgrpo.tasks import get_task

    module = get_task(task).build.__module__
    return None if module == "__main__" else module


def write_specs(specs: list[RunSpec], path: Path) -> Path:
    """A YAML file that ``trgrpo train --config`` reads (base + grid, and the task modules to import: a
    module of a .py file is copied beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    grid = [s.model_dump() for s in specs]
    imports = []
    for module in sorted({m for s in specs if (m := task_module(s.task))}):
        file = getattr(sys.modules.get(module), "__file__", None)
        if module.split(".")[0] != "trgrpo" and file:  # a task of a .py file beside a config: copied beside this one
            shutil.copy(file, path.parent / Path(file).name)
            module = Path(file).name
        imports.append(module)
    data = {"imports": imports} if imports else {}
    path.write_text(yaml.safe_dump({**data, "base": {}, "grid": grid}, sort_keys=False))
    return path


def run_command(
    spec_file: Path | str,
    *,
    results_dir: Path | str,
    gpus: int = 0,
    cpu_processes: int = 1,
    accelerate_config: str = "configs/zero2.yaml",
    force: bool = False,
    keep_checkpoints: bool = True,
    cpu_zero: int | None = None,
    bf16: bool = False,
) -> list[str]:
    """The command that trains one spec file in its own process: ``accelerate launch`` with the DeepSpeed config
    (``gpus > 1``; on CPU, ``cpu_processes > 1`` with ``cpu_zero``, ZeRO stage 2 or 3: the same engine on gloo),
    ``torchrun`` on CPU (``cpu_processes > 1``, tests), else ``trgrpo train``. The launcher's mixed precision
    follows the spec (``bf16``; never on a CPU), so DeepSpeed's and the trainer's settings cannot disagree."""
    train = ["-m", "trgrpo", "train", "--config", str(Path(spec_file).resolve())]
    train += ["--results", str(Path(results_dir).resolve())]
    train += (["--force"] if force else []) + ([] if keep_checkpoints else ["--no-keep-checkpoints"])
    accelerate = [sys.executable, "-m", "accelerate.commands.launch"]
    if gpus > 1 or (cpu_processes > 1 and cpu_zero):
        cfg = _accelerate_config_path(accelerate_config if gpus > 1 else f"configs/zero{cpu_zero}.yaml")
        n, precision = (gpus, "bf16" if bf16 else "no") if gpus > 1 else (cpu_processes, "no")
        return [
            *accelerate,
            *("--config_file", str(cfg), "--num_processes", str(n), "--mixed_precision", precision),
            *("--main_process_port", str(free_port())),
            *train,
        ]
    if cpu_processes > 1:  # torchrun on CPU: gloo, the processes of the GPU path without a GPU
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(cpu_processes)]
        return [*torchrun, "--master_port", str(free_port()), *train]
    return [sys.executable, *train]


def _accelerate_config_path(accelerate_config: str) -> Path:
    cfg = Path(accelerate_config)
    return cfg if cfg.is_absolute() else ROOT / cfg


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(gpus: int = 0, cpu_zero: int | None = None) -> dict:
    """The environment of a run's process: this one's, with the checkpoint folder, the repository on PYTHONPATH,
    DeepSpeed's CPU accelerator for the CPU ZeRO tier and, for a one-GPU run on a machine with several, only the
    first GPU visible."""
    env = dict(os.environ)
    if cpu_zero and not gpus:
        env["DS_ACCELERATOR"] = "cpu"
    env["TRGRPO_CHECKPOINTS"] = str(Path(files.CHECKPOINT_DIR).resolve())
    if gpus == 1 and n_devices() > 1:
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def launch_engine(
    gpus: int, cpu_processes: int, accelerate_config: str, isolate: bool, cpu_zero: int | None = None
) -> dict:
    """The engine (:func:`trgrpo.runs.checkpoints.engine`) the runs of :func:`launch` train on."""
    if not isolate:
        return checkpoints.engine()
    if not gpus and cpu_processes > 1 and cpu_zero:
        return {"world_size": cpu_processes, "deepspeed_stage": cpu_zero}
    if gpus > 1:
        cfg = yaml.safe_load(_accelerate_config_path(accelerate_config).read_text())
        stage = (
            cfg.get("deepspeed_config", {}).get("zero_stage") if cfg.get("distributed_type") == "DEEPSPEED" else None
        )
        return {"world_size": gpus, "deepspeed_stage": stage}
    return {"world_size": max(1, cpu_processes) if not gpus else 1, "deepspeed_stage": None}


def launch(
    specs: list[RunSpec],
    *,
    gpus: int | None = None,
    accelerate_config: str = "configs/zero2.yaml",
    results_dir: Path | str | None = None,
    force: bool = False,
    keep_checkpoints: bool = True,
    cpu_processes: int = 1,
    log_dir: Path | str | None = None,
    isolate: bool | None = None,
    cpu_zero: int | None = None,
) -> list[dict]:
    """Run the specs without a record (all with ``force``), each in its own process (:func:`run_command`, its log
    in ``log_dir``) when ``isolate`` (default: on a GPU or several CPU processes), else here; return the records."""
    if problem := refuse_without_cuda(specs):  # a notebook shows the one line (ConfigError._render_traceback_)
        raise ConfigError(problem)
    results_dir = Path(results_dir or RESULTS_DIR).resolve()
    log_dir = Path(log_dir).resolve() if log_dir else RUNS_DIR / "launch"
    gpus = n_devices() if gpus is None else gpus
    isolate = (gpus > 0 or cpu_processes > 1) if isolate is None else isolate
    run_engine = launch_engine(gpus, cpu_processes, accelerate_config, isolate, cpu_zero)
    records = [record_path(s.group, s.name, results_dir) for s in specs]
    todo = [s for s, path in zip(specs, records) if force or not path.exists()]
    if not force:  # a record or checkpoints of another spec or engine under a run's name: refused before any starts
        for s, path in zip(specs, records):
            if path.exists():
                checkpoints.refuse_another_run(read_record(path), s, run_engine, path)
            else:
                checkpoints.check_run_folders(s, run_engine)
    where = f"{gpus} GPU(s)" if gpus else f"CPU ({cpu_processes} process(es))"
    print(f"{len(specs)} run(s), {len(specs) - len(todo)} already done, {len(todo)} to run on {where}", flush=True)
    failed = []

    def one(spec: RunSpec) -> None:
        k = todo.index(spec) + 1  # "[k/n] name" opens the output of each run (a child's log begins with it)
        if not isolate or task_module(spec.task) is None:  # a task defined in __main__: a child cannot import it
            print(f"[{k}/{len(todo)}] {spec.name} (in this process)", flush=True)
            experiment.run(spec, results_dir=results_dir, keep_checkpoints=keep_checkpoints, resume=not force)
            return
        cfg = write_specs([spec], log_dir / spec.group / f"{spec.name}.yaml")
        log = cfg.with_suffix(".log")
        cmd = run_command(
            cfg,
            results_dir=results_dir,
            gpus=gpus,
            cpu_processes=cpu_processes,
            accelerate_config=accelerate_config,
            force=force,
            keep_checkpoints=keep_checkpoints,
            cpu_zero=cpu_zero,
            bf16=spec.bf16,
        )
        print(f"[{k}/{len(todo)}] {spec.name}\n  log: {log}\n  $ {' '.join(cmd)}", flush=True)
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=child_env(gpus, cpu_zero),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        with log.open("w") as fh:
            for line in proc.stdout:
                fh.write(line)
                sys.stdout.write(line)
        if proc.wait() != 0:
            failed.append(f"{spec.name} (exit code {proc.returncode}, log {log})")

    # each run says "[k/n] name" and streams its log: no bar on stderr besides (a refusal there is one line)
    experiment.run_pending(todo, one, results_dir=results_dir, force=True, disable=True)
    if failed:
        raise RuntimeError(f"{len(failed)} run(s) failed: " + "; ".join(failed))
    return [read_record(path) for path in records if path.exists()]


@contextlib.contextmanager
def retrieval_server(*args: str, wait_s: float = 60.0) -> Iterator[str]:
    """``scripts/retrieval_server.py ARGS`` as its own process on a free port of 127.0.0.1, its health check answered
    within ``wait_s`` (else a RuntimeError with its output); yields its ``/retrieve`` URL, stops it on exit."""
    from trgrpo.tasks.search_data import ServerRetriever

    port = free_port()
    cmd = [sys.executable, str(ROOT / "scripts" / "retrieval_server.py"), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/retrieve"
    try:
        deadline, error = time.monotonic() + wait_s, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                ServerRetriever(url, timeout=2.0).check()
                break
            except ConnectionError as e:
                error = e
                time.sleep(0.2)
        else:
            out = proc.stdout.read() if proc.poll() is not None else ""
            raise RuntimeError(f"retrieval server on port {port} not ready in {wait_s:g} s: {error} {out[-400:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
