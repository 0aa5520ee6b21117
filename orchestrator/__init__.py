"""orchestra: a containerized evaluation orchestrator for AI agents."""

__version__ = "0.1.0"
