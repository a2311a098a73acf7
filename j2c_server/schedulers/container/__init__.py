"""The ``container`` backend: containers of the platform image on this machine's podman or
Docker, through the Docker Engine API; also its image probe."""
