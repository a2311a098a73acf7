"""The ``kubernetes`` backend: batch/v1 Jobs (Indexed for several nodes or a sweep) through the
API server."""
