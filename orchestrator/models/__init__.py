"""Pydantic schemas at orchestra's boundaries: task, manifest, result."""
