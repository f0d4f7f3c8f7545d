"""Fixtures shared by the catalog and credential tests."""

from tests.catalog.helpers import relay  # noqa: F401  (a fixture)
