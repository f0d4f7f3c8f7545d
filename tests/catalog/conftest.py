"""These tests apply whole catalogs: they run on a database of their own (tests/databases.py)."""

from tests.catalog.helpers import relay  # noqa: F401  (a fixture)
from tests.databases import database_fixtures

services, settings, settings_env, runtime, app, admin, relay_api = database_fixtures("catalog")
