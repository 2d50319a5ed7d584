# Factory Floor: the front door. `make demo` runs the product, `make test` proves it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PORT ?= 8050

.PHONY: setup demo test test-fast chromium prometheus slurm lint bench reliability clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

setup: $(STAMP)

## Fresh store, dev-64 replayed live, dashboard on http://127.0.0.1:$(PORT)
demo: setup
	$(BIN)/factoryfloor demo --port $(PORT)

chromium:
	@bash scripts/ensure-chromium.sh

prometheus:
	@bash scripts/ensure-prometheus.sh

slurm:
	@bash scripts/ensure-slurm.sh

## Whole suite, Playwright UI tests in headless Chromium included (never skipped): the tests
## that share no server or port on both cores, then the browser and live-server ones in turn
test: setup chromium prometheus slurm
	@$(BIN)/python -m pytest -m "not ui and not live" -n 2; a=$$?; \
	$(BIN)/python -m pytest -m "ui or live"; b=$$?; \
	test $$a -eq 0 -a $$b -eq 0

## The edit loop: every test but the browser, live-server and slow ones, on both cores
test-fast: setup
	$(BIN)/python -m pytest -m "not ui and not live and not slow" -n 2 -q

lint: setup
	$(BIN)/ruff check telemetry app tests benchmarks

## Every benchmark (benchmarks/all.py): the llama3-405b store replayed once and shared, each
## run's figures kept in benchmarks/results/ and compared with the run before
bench: setup
	$(BIN)/python benchmarks/all.py

reliability: setup
	$(BIN)/python benchmarks/reliability.py

clean:
	rm -rf $(VENV) *.duckdb *.duckdb.wal .pytest_cache
