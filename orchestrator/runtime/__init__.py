"""Where containers run. `base` is the seam; `docker` the local Docker engine backend."""


def open_runtime(max_pool_size: int = 16):
    """The container engine on this host (Docker: the one implementation; imported here,
    lazily, so nothing else names it). Raises InfraError when no engine answers."""
    from orchestrator.runtime.docker import DockerRuntime

    return DockerRuntime(max_pool_size=max_pool_size)
