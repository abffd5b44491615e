# wsfleet: `make demo` sets everything up and runs a real scenario with a report; `make test` runs the checks.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp

.PHONY: setup demo test lint typecheck unit scenarios bench clean browser

setup: $(STAMP) $(NODE_STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[harness,dev]"
	@touch $(STAMP)

# dynalite (DynamoDB) runs on Node; without npm the embedded backend falls back to moto and says so.
$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: DynamoDB will run on moto (slower); install Node.js for dynalite"; mkdir -p node_modules; fi
	@touch $(NODE_STAMP)

demo: setup
	$(PY) -m harness.demo

lint: setup
	$(VENV)/bin/ruff check .

typecheck: setup
	$(VENV)/bin/mypy --strict fleet

unit: setup
	$(VENV)/bin/pytest -q tests

scenarios: setup
	$(VENV)/bin/pytest -q harness/scenarios

# Headless Chromium for the report's browser test (tests/harness/report/test_browser.py): installed when
# missing and apt-get is there to run as root; otherwise, or if it fails, that test skips and says why.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium (Debian package) for the report's browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	  || echo "could not install chromium: the report's browser test will be skipped"; fi

# Two passes: the tests that start no timed fleet run on two processes; then the e2e tests (real fleets whose
# recovery bounds are timed) run one at a time, alone on the machine.
test: lint typecheck browser
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2 -m "not e2e" --durations=15
	$(VENV)/bin/pytest -q -p no:cacheprovider -m e2e --durations=15

bench: setup
	$(PY) bench/coordination_cost.py

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
