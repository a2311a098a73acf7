"""The ``slurm`` backend: batch jobs (and a sweep's array job) through slurmrestd."""
