"""tiers/flows/clients/upstream_e2e.py without a server: how tests are named, counted and kept off the network."""

from __future__ import annotations

import re
import sys

from tiers.flows.clients import upstream_e2e as e2e

# test names of tests/javascript/tests/*.test.ts at 3bb6fad
JS_KEPT = (
    "01 sandbox lifecycle, health, endpoint, metrics, renew, connect",
    "01b sandbox create with host volume mount (read-write)",
    "01aa sandbox create with networkPolicy via server proxy (later)",
    "04 go and typescript execution (smoke)",
)


def test_the_js_name_filter_drops_exactly_the_off_machine_tests():
    pattern = re.compile(e2e.js_name_filter())  # the same syntax in JS for this pattern: (?!...), |, $, escapes
    for name in e2e.JS_OFF_MACHINE:
        assert not pattern.search(name), name
    for name in JS_KEPT:
        assert pattern.search(name), name


def test_languages_of_python_and_js_names():
    assert e2e.language("test_02_java_code_execution") == "java"
    assert e2e.language("02 java code execution") == "java"
    assert e2e.language("04 go and typescript execution (smoke)") == "go"
    assert e2e.language("test_05_typescript_code_execution") == "typescript"
    assert e2e.language("06 concurrent execution") == "multi"
    assert e2e.language("01 sandbox lifecycle, health, endpoint, metrics, renew, connect") == "python"


def test_counts_group_verdicts_by_language():
    table = e2e.counts({"a::02 java code execution": "failed", "b::test_05_typescript_x": "passed", "c::x": "passed"})
    assert table == {"java": {"failed": 1}, "typescript": {"passed": 1}, "python": {"passed": 1}}


JUNIT = (
    '<testsuites><testsuite><testcase classname="tests.t.TestA" name="test_ok" time="1.5"/>'
    '<testcase classname="tests.t.TestA" name="test_bad" time="0.25"><failure/></testcase>'
    '<testcase classname="x" name="test_skip"><skipped/></testcase></testsuite></testsuites>'
)


def test_junit_reads_each_testcase_and_a_timeout(tmp_path):
    def write(xml: str) -> list[str]:
        return [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", xml, JUNIT]

    cases = e2e._junit(write, str(tmp_path), {}, 30)
    assert cases == [
        ("tests.t.TestA", "test_ok", "passed", 1.5),
        ("tests.t.TestA", "test_bad", "failed", 0.25),
        ("x", "test_skip", "skipped", 0.0),
    ]
    assert e2e._junit(lambda xml: [sys.executable, "-c", "import time; time.sleep(5)"], str(tmp_path), {}, 0.2) is None
