"""The OpenAI- and Anthropic-compatible batch APIs (OpenAI Files + Batches, Anthropic Message Batches) as views
built on the batch engine's calls: the engine (app/batches) never imports them. No Flask."""
