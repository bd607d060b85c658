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

.PHONY: all install figures test test-fast clean-venv theory-check verl-test

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

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

theory-check: $(STAMP)
	$(BIN)/vsr theory check --cases 200

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

clean-venv:
	rm -rf $(VENV) $(VERL_VENV)
