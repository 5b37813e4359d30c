"""Test bodies more than one tier runs (t1 on the mock, t4 live, ...), one folder per component they drive."""
