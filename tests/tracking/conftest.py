"""The tracking tests' MLflow server fixture (``tests/tracking/mlflow_server.py``)."""

from tests.tracking.mlflow_server import mlflow_server

__all__ = ["mlflow_server"]
