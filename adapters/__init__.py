"""Upstream wire shapes: one module per shape, plus the shape-to-binding rule."""
