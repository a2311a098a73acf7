"""A job's life on the lab side: the service every front end calls, the stages it runs, who drives
it, and how it is watched to its end. See docs/architecture.md for the module map."""
