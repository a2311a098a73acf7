"""The ``ray`` backend: Ray jobs through the dashboard's Jobs REST API."""
