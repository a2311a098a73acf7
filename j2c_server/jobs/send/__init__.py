"""A request on its way to being a job: resolved and drafted, checked before anything runs, the
send rule (attach or a new job, and why), its stage keys, and what the job is given."""
