"""Relay: an LLM gateway with batches run on its own Dramatiq workers.

Importing a part of `app` costs only that part. The API's app factory is `app.api.factory.create_app`, so a
worker process or a `relay batches` command never loads Flask and the OpenAPI schemas it has no use for."""
