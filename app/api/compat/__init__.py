"""Blueprints of the OpenAI- and Anthropic-compatible batch APIs (app/compat), and what they share."""
