"""These tests apply whole catalogs: they run on the catalog tests' own database."""

from tests.catalog.private_fixtures import app, client, relay, runtime, settings, settings_env  # noqa: F401
