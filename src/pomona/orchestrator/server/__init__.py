"""`pomona serve`: the REST service (routes, the coordinator that leases and serializes work, its store)."""
