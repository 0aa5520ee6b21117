"""Where containers run. `base` is the seam; `docker` the local Docker engine backend."""
