"""Slurm as the engine of a run: `pomona run ... --slurm` spreads a run's attempts over a
cluster's nodes as one job array, each node playing its share with its own sandboxes and proxy
into the run's shared trajectory directory, and the driver types a lost node's attempts as infra
failures and submits them again. `cluster` speaks to Slurm's commands, `executor` drives a run,
`worker` is what runs on a node.
"""
