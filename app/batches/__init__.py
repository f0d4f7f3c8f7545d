"""Batches: submit, dispatch, run, read and cancel; Postgres is the record, RabbitMQ only transport."""
