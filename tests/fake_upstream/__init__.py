"""Tests of the fake upstream (devtools/fake_upstream) and the harness other tests start it with."""
