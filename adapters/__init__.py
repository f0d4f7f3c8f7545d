"""Upstream wire shapes: one module per shape, plus the shape-to-binding rule."""

from adapters.registry import ADAPTERS, get_adapter

__all__ = ["ADAPTERS", "get_adapter"]
