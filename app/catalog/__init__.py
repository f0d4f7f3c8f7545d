"""The catalog: hosts, keys, models, bindings, policies, principals; its store, cache and apply."""
