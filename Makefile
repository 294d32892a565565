# The two commands of the README's quickstart. Each sets up .venv on first use (idempotent).
#   make report   the main job: `onlinesm report` on the built-in kernels (CPU when no GPU)
#   make test     the test suite (what CI runs)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test report clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# A CPU build of torch; a plain `torch` would pull a several-GB CUDA build.
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[all,dev]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

report: $(STAMP)
	$(BIN)/onlinesm report --out reports/latest

clean:
	rm -rf $(VENV) reports/latest
