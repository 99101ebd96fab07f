# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
SARIF_TOOL = .sarif-tools/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool

.PHONY: demo test venv clean docs sarif-tools

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

test: $(STAMP) $(SARIF_TOOL)
	$(PY) -m pytest -q -n 2 --dist loadfile tests

# The Microsoft SARIF multitool, used by the tests to check logs with GitHub's rules.
$(SARIF_TOOL):
	npm install --silent --no-audit --no-fund --prefix .sarif-tools @microsoft/sarif-multitool

sarif-tools: $(SARIF_TOOL)

docs: $(STAMP)
	$(PY) -m dynamo_onnx.rules.docs > docs/rules.md

clean:
	rm -rf $(VENV) .sarif-tools mlp.onnx mlp.sarif mlp.md
