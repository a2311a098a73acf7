"""A job driven to its end in this process: who drives it (the lease), the stages it runs (the
pipeline, the watch stage) and the drivers of the jobs this process drives."""
