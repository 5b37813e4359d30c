# The README's two commands are `make demo` and `make test`. Everything else is optional (CI also runs `make lint`).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-stamp
PYTEST := $(PY) -m pytest

.PHONY: venv test test-serial test-slow lint fmt demo bench bench-quick record-fixtures clean

$(STAMP): requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	touch $(STAMP)

venv: $(STAMP)

## Offline tiers t0-t3 and the differential tier (tiers/diff: the real execd vs the mock, skips without ../shared/opensandbox/execd; t3 runs against ../shared/opensandbox/execd, isolated, when it exists or OSB_EXECD_BIN, else the stand-in);
## t4 skips with one line unless OPENSANDBOX_LIVE=1.
## Inside each tier the tests sit in a folder per component (tiers/t1/execd, tiers/t1/sandbox, ...); every test carries
## its tier as a marker (tiers/conftest.py), and make test selects the tiers by marker (TEST_TIERS). pytest-xdist runs
## the files in TEST_JOBS workers, a file at a time to the next free worker (--dist loadfile: most tests wait on sockets
## and subprocesses, so a 2-core machine runs eight at about its CPU); tiers/toolkit/session_report.py brings the
## workers' end-of-session reports to one summary. The checks marked `lint` (ruff, mypy, actionlint, zizmor, commit
## subjects) are deselected: `make lint` runs them.
TEST_TIERS ?= t0 or t1 or t2 or t3 or t4 or diff
TEST_JOBS  ?= 8
test: $(STAMP)
	$(PYTEST) -q -n $(TEST_JOBS) --dist loadfile -m "($(TEST_TIERS)) and not lint" tiers

## The same tiers in one pytest process (slower; easier to read when debugging).
test-serial: $(STAMP)
	$(PYTEST) -q -m "not lint" tiers/t0 tiers/t1 tiers/diff tiers/t2 tiers/t3 tiers/t4

## Slow fuzzing and soak tests.
test-slow: $(STAMP)
	$(PYTEST) -q -m slow tiers

## The checks marked `lint`, all in tiers/t0/repo: ruff check (rules and import sorting in pyproject.toml), ruff format
## --check, a reason on every noqa, mypy (--strict on plugin/ and on mock_opensandbox/), actionlint
## and zizmor on the workflows (zizmor installs only on Python >= 3.11: it skips with one line elsewhere), the commit
## subjects (tools/commit_msg_check.py --history), the pinned versions. CI runs it before the tests.
lint: $(STAMP)
	$(PYTEST) -q -m lint tiers/t0/repo

## Sort the imports and format the code, in place (ruff; `make lint` checks both).
fmt: $(STAMP)
	$(VENV)/bin/ruff check --select I --fix .
	$(VENV)/bin/ruff format .

## Start the embedded mock, install the plugin into a throw-away HOME, run an end-to-end flow.
demo: $(STAMP)
	$(PY) demo.py

bench: $(STAMP)
	$(PY) -m bench

bench-quick: $(STAMP)
	$(PY) -m bench --quick

## Record fixtures from a live server (see README, "Recording fixtures").
record-fixtures: $(STAMP)
	$(PY) -m record --out fixtures $(RECORD_ARGS)

clean:
	rm -rf $(VENV) bench/out .hypothesis
