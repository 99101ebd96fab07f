# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: demo test venv clean docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned: on these machines pip takes the CPU build from a local file.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/mlp.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile tests

docs: $(STAMP)
	$(PY) -m dynamo_onnx.rules.docs > docs/rules.md

clean:
	rm -rf $(VENV) mlp.onnx mlp.sarif mlp.md
