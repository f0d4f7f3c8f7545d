"""Demo and test scaffolding: the fake upstream and the helpers that start Relay's processes and services.

Used by `tests/`, `bench/` and `scripts/dev.sh`; never by the runtime packages (`app`, `actors`, `adapters`,
`schemas`), and not installed by `requirements.txt` or shipped in the image.
"""
