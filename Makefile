# The README's two commands are `make demo` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deps-stamp
PYTEST := $(PY) -m pytest

.PHONY: venv test test-serial test-slow demo bench bench-quick record-fixtures clean

$(STAMP): requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	touch $(STAMP)

venv: $(STAMP)

## Offline tiers t0-t3 and the differential tier (tiers/diff: the real execd vs the mock, skips without ../shared/opensandbox/execd; t3 runs against ../shared/opensandbox/execd, isolated, when it exists or OSB_EXECD_BIN, else the stand-in);
## t4 skips with one line unless OPENSANDBOX_LIVE=1.
## Six concurrent groups (most tests wait on sockets and subprocesses, so a 2-core machine runs at about half its
## CPU with four): t1's mock tests in two halves by file name (test_a* to test_k*, test_l* to test_z*); the
## differential tier and t1's plugin-over-EPP tests (T1_EPP); t0; t3; t2 and t4.
T1_EPP := $(wildcard tiers/t1/test_plugin_*.py) tiers/t1/test_faults_plugin.py tiers/t1/test_argv_probe_faults.py \
          tiers/t1/test_secret_canary.py tiers/t1/test_workbench_dashboard.py
T1_MOCK := $(filter-out $(T1_EPP),$(sort $(wildcard tiers/t1/test_*.py)))
T1_AK := $(foreach l,a b c d e f g h i j k,$(filter tiers/t1/test_$(l)%,$(T1_MOCK)))
T1_LZ := $(filter-out $(T1_AK),$(T1_MOCK))
test: $(STAMP)
	$(PY) tiers/run_tiers.py "$(T1_AK)" "$(T1_LZ)" "tiers/diff $(T1_EPP)" "tiers/t0" "tiers/t3" "tiers/t2 tiers/t4"

## The same tiers in one pytest process (slower; easier to read when debugging).
test-serial: $(STAMP)
	$(PYTEST) -q tiers/t0 tiers/t1 tiers/diff tiers/t2 tiers/t3 tiers/t4

## Slow fuzzing and soak tests.
test-slow: $(STAMP)
	$(PYTEST) -q -m slow tiers

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
