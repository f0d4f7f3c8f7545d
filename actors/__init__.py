"""Dramatiq broker setup and actors. Import `actors.broker` before any actor module."""
