# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
# The SARIF consumers from npm the tests feed every log to (tests/sarif_tools.py); those from
# PyPI (sarif-tools, sarif-pydantic) are in the test extra.
SARIF_NPM  = @microsoft/sarif-multitool@5.7.0 sarif-junit@1.1.4 @security-alert/sarif-to-markdown@1.11.1
SARIF_TOOLS = .sarif-tools/.installed

.PHONY: demo test test-fast venv clean docs sarif-tools bench bench-llm bench-whisper fuzz coverage compat llm-compat

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

LINTED = src tests benchmarks examples

# Every tool is installed first: a check that finds its tool missing fails instead of skipping.
# Both layers; the 15 slowest tests are listed at the end.
test: $(STAMP) $(SARIF_TOOLS)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)
	SARIF_TOOLS_REQUIRED=1 $(PY) -m pytest -q -n 2 --dist loadfile --durations=15 tests

# The unit layer only (tests/conftest.py's UNIT_MODULES and tests/passes/: no full export,
# which fails there), in one process: under a minute.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m unit --durations=5 tests

# The Microsoft SARIF multitool (GitHub's rules, with tests/sarif-consumers/github.config.xml),
# sarif-junit and sarif-to-markdown, into .sarif-tools/.
$(SARIF_TOOLS): Makefile
	npm install --silent --no-audit --no-fund --prefix .sarif-tools $(SARIF_NPM)
	touch $(SARIF_TOOLS)

sarif-tools: $(SARIF_TOOLS)

# dynamo-onnx against torch.onnx.export(dynamo=True), fresh processes, ~20 min on 2 cores.
# Writes benchmarks/results/results.{json,md}; docs/performance.md shows the latest table.
bench: $(STAMP)
	$(PY) benchmarks/compare.py $(BENCH_ARGS)
	# Llama-2-7B sizes in fake mode, one decoding step with its KV cache: time and peak RSS.
	$(PY) benchmarks/llama_fake.py --cache

# Our LLM folders against onnxruntime-genai's model builder from the same random weights
# (hidden 1024, 8 layers) of Llama, Mistral (window 256) and Qwen3, both run by
# onnxruntime_genai.Generator in one run: export time, nodes, prefill and decode ms at prompts
# 128 and 512, fp32 and int4, token agreement (Mistral's at 512, past its window); a builder
# folder that fails is a "builder failed" cell; and GPT-2 124M's export against
# torch.export.export alone. ~15 min a model on 2 cores; BENCH_LLM_ARGS="--models llama".
# Writes benchmarks/results/llm_genai.{json,md}; docs/performance.md shows the table.
bench-llm: $(STAMP)
	$(PY) benchmarks/llm_genai.py $(BENCH_LLM_ARGS)
	# Peak RSS and wall time of export-llm and the builder on bf16 Llama checkpoints of 0.49B
	# and 1.21B parameters, fp32 and int4, one fresh process at a time (issue 44). ~25 min.
	# Writes benchmarks/results/llm_memory.{json,md}; docs/performance.md shows the table.
	$(PY) benchmarks/llm_memory.py $(BENCH_MEMORY_ARGS)
	# Whisper: encode (first token) and decode against the builder's folder (issue 45). ~5 min.
	$(PY) benchmarks/whisper_genai.py $(BENCH_WHISPER_ARGS)

# Whisper folders alone, ours against the builder's, transcribing in onnxruntime-genai
# (docs/performance.md); also the last step of bench-llm.
bench-whisper: $(STAMP)
	$(PY) benchmarks/whisper_genai.py $(BENCH_WHISPER_ARGS)

# Every torch OpInfo operator exported by dynamo-onnx and by torch.onnx in the same run, each
# compared with eager in ONNX Runtime: docs/coverage.{md,json}. ~20 min on 2 cores.
coverage: $(STAMP)
	$(PY) benchmarks/op_coverage.py $(COVERAGE_ARGS)

# Generated models crossed with the call forms people use (dynamic_axes, dynamic_shapes in each
# structure, kwargs=, opsets, exported programs, dynamo_export), exported by dynamo-onnx and by
# torch.onnx, each compared with eager at two sizes: docs/compat.{md,json}. Fails when a case
# fails with dynamo-onnx only. COMPAT_ARGS="--cases 200 --seed 1". The default 2000 cases
# cost ~1.15 s of CPU each: ~20 min on 2 idle cores (docs/compat.md has the last run's times);
# "--reference on-failure" runs torch.onnx only where dynamo-onnx does not match eager (the
# same bugs, no agree/torch-only figures), about a sixth of that.
compat: $(STAMP)
	$(PY) benchmarks/compat.py $(COMPAT_ARGS)

# Every causal LM family transformers ships and onnxruntime-genai has a type for, as a tiny
# random folder: export-llm fp32 and int4 and the genai model builder on each, greedy tokens
# from onnxruntime-genai against transformers' at a prompt past every window. Writes
# docs/llm_compat.json and the table in docs/llm.md; fails when a row of ours
# is a FAILURE (exit 0 without a working folder, or a crash without a rule id). ~1 min a
# family on 2 idle cores. LLM_COMPAT_ARGS="--families llama gpt2 --precisions fp32".
llm-compat: $(STAMP)
	$(PY) benchmarks/llm_compat.py $(LLM_COMPAT_ARGS)

# More property-based fuzzing than `make test` runs (random, not the fixed CI examples).
FUZZ_EXAMPLES ?= 500
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_RANDOM=1 $(PY) -m pytest -q tests/test_fuzz.py --hypothesis-show-statistics

docs: $(STAMP)
	$(PY) -m dynamo_onnx.rules.docs > docs/rules.md

clean:
	rm -rf $(VENV) .sarif-tools mlp.onnx mlp.sarif mlp.md
