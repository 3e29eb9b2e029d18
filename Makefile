# Two set-up commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
DEMO_DB = demo/.zhin/data.sqlite
STAMP   = $(VENV)/.installed
LIVE_VENV ?= .venv-live

.PHONY: demo test gates install docs fuzz lint typecheck check bench clean eval-live measure screenshot

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/python -c "from zhin_cli.core.tokens import seed_cache; print('tiktoken ranks ready in', seed_cache())"
	$(BIN)/python scripts/junit_xsd.py   # junit-10.xsd for the JUnit tests (from pytest's sdist on the index)
	touch $(STAMP)

install: $(STAMP)

# The demo is a real bot's database: the one upstream zhin itself wrote (tests/data/upstream-db/, byte for byte; its
# story: docs/storage.md "Upstream's real tables"). It ends with a picture of its busiest session: one row per
# request in the terminal, every request in report.html.
DEMO_KEY = onebot11:tokyo-ob11:group:856301447
# README's picture (docs/report-demo.png): the demo session's report page in headless Chromium
screenshot: $(STAMP)
	$(BIN)/python scripts/demo_screenshot.py

demo: $(STAMP)
	rm -rf demo && mkdir -p demo/.zhin
	cp tests/data/upstream-db/data.sqlite $(DEMO_DB)
	cd demo && ../$(BIN)/zhin sessions
	cd demo && ../$(BIN)/zhin trace '$(DEMO_KEY)' --all
	cd demo && ../$(BIN)/zhin report html '$(DEMO_KEY)' -o report.html
	@echo
	@echo "What you are looking at: a real bot's database. Upstream zhin (its own OneBot 11 adapter, turn engine and"
	@echo "SQLite layer) wrote demo/.zhin/data.sqlite (a copy of tests/data/upstream-db/data.sqlite) over three days"
	@echo "in two groups and a private chat; zhin only reads it. Each row above is one request the bot made to its"
	@echo "model in group 856301447. Upstream stores only the triggered turns: what members said in between is read"
	@echo "from the events block each turn carries, one message per member under its real author, time and message"
	@echo "id; joins, kicks, leaves, mutes and role changes come from its member events, with their operators (see"
	@echo "them with --turn 11 --show-request). Header times are Asia/Tokyo, the zone the bot's own [Turn context]"
	@echo "names (no --timezone given)."
	@echo "prompt and cached are zhin's ADR 0041 assembly of those rows; bot sent and bot cached are the usage the"
	@echo "bot's provider reported for the same request (its system prompt and tools are not in the database)."
	@echo "demo/report.html draws the same requests: open it in a browser and click a turn for its segments,"
	@echo "wire messages and the diff against the turn before."
	@echo
	@echo "Next: . .venv/bin/activate   (zhin is installed in .venv/bin), then the README's Use lines."

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist worksteal -p no:cacheprovider

# The pre-merge gates of docs/use.md, on this repository itself: the eval scenarios offline (JUnit in
# reports/), the fixed prompt cost against prompt-budget.yaml, and prefix stability of the fixtures.
# The scenarios load this repository's own plugins (eval_cases/plugins/): opted in with --allow-plugins
# (docs/safety.md "Plugins and trust"); no git ref's plugin code runs here.
gates: $(STAMP)
	mkdir -p reports
	$(BIN)/zhin --allow-plugins eval eval_cases/ -j 2 --junit reports/eval-junit.xml
	$(BIN)/zhin budget check
	$(BIN)/zhin prefix-diff fixtures/

lint: $(STAMP)
	$(BIN)/ruff check zhin_cli tests benchmarks scripts
	$(BIN)/mypy

check: lint test

# The code figures of issue 32 (Any and dict[str, Any] per kLOC, TypedDicts, import cycles, largest modules, the
# tools/ share) and the `mypy --strict` error count (0: pyproject holds the whole package to `strict = true`).
measure: $(STAMP)
	$(BIN)/python scripts/measure_code.py --mypy

fuzz: $(STAMP)
	ZHIN_FUZZ_EXAMPLES=200000 $(BIN)/python -m pytest -n 2 -p no:cacheprovider tests/test_properties.py

bench: $(STAMP)
	$(BIN)/python benchmarks/machine.py
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/trace_scale.py --trace --before ''
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/prefix_diff.py
	$(BIN)/python benchmarks/memory.py
	$(BIN)/python benchmarks/economy.py
	$(BIN)/python benchmarks/window.py
	$(BIN)/python benchmarks/anthropic_breakpoints.py
	$(BIN)/python benchmarks/parallel.py
	$(BIN)/python benchmarks/live_writer.py --seconds 20 --interval-ms 50 --mode delete,wal --reader cli,load,shared
	$(BIN)/python benchmarks/serve_load.py --clients 32 --requests 100
	$(BIN)/python benchmarks/serve_proxy.py --clients 32 --requests 50 --sequential 300
	$(BIN)/python benchmarks/view_connections.py --connections 365
	$(BIN)/python benchmarks/st_matching.py
	$(BIN)/python benchmarks/upstream_events.py
	$(BIN)/python benchmarks/upstream_ids.py

# The live tier (docs/live.md): a real llama.cpp server with SmolLM2-135M-Instruct on 127.0.0.1, in a venv of its
# own. The first run on a machine compiles llama.cpp (about 6 min on 2 cores); the wheel is cached in
# ~/.cache/zhin-wheels, so later runs install in seconds.
eval-live: $(STAMP)
	$(BIN)/python scripts/live_server.py install --venv $(LIVE_VENV)
	$(BIN)/python scripts/live_server.py run --venv $(LIVE_VENV) -- $(BIN)/python -m pytest -p no:cacheprovider tests/live
	$(BIN)/python scripts/live_server.py run --venv $(LIVE_VENV) -- $(BIN)/zhin --allow-plugins eval --live --no-cache eval_cases/

clean:
	rm -rf $(VENV) $(LIVE_VENV) demo .pytest_cache .mypy_cache .ruff_cache

docs: $(STAMP)
	$(BIN)/python scripts/gen_cli_docs.py
