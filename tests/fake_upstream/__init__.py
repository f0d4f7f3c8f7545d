"""Tests of the fake upstream (app/fake_upstream) and the harness other tests start it with."""
