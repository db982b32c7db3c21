"""The service's clocks (the coordinator's and its jobs'), in one record tests shorten."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Timing:
    """The service's clocks; tests shorten them."""

    maintenance_interval: float = 1.0  # reaper, liveness beat, job purge
    replica_ttl: float = 5.0  # a replica silent this long is dead
    lock_ttl: float = 15.0  # an exec lock not renewed this long is free
    create_wait: float = 900.0  # how long a create waits for another replica creating the same id
    job_keep_local: float = 60.0  # finished jobs stay in memory (for streams) this long
