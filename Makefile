# Two set-up commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
DEMO_DB = demo/.zhin/data.sqlite
STAMP   = $(VENV)/.installed

.PHONY: demo test install docs fuzz lint typecheck check bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -c "from zhin_cli.tokens import seed_cache; print('tiktoken ranks ready in', seed_cache())"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	rm -rf demo && mkdir -p demo/.zhin
	$(BIN)/zhin import fixtures/group-busy.jsonl fixtures/private-chat.jsonl fixtures/legacy-upstream.jsonl --db $(DEMO_DB)
	cd demo && ../$(BIN)/zhin sessions
	cd demo && ../$(BIN)/zhin trace 'icqq:8596238:group:1048877509' --turn 4 --show-request

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check zhin_cli tests
	$(BIN)/mypy

check: lint test

fuzz: $(STAMP)
	ZHIN_FUZZ_EXAMPLES=200000 $(BIN)/python -m pytest -n 2 -p no:cacheprovider tests/test_properties.py

bench: $(STAMP)
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/prefix_diff.py
	$(BIN)/python benchmarks/memory.py

clean:
	rm -rf $(VENV) demo .pytest_cache .mypy_cache .ruff_cache

docs: $(STAMP)
	$(BIN)/python scripts/gen_cli_docs.py
