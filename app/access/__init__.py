"""What this process knows of who may do what: one snapshot of the catalog and the credentials, kept current
(cache.py) and read by authentication and the pipeline without a database round trip."""
