"""Verification an optimiser cannot reach: shared by the SWE-bench and Terminal-Bench verifiers.

    spoof       what in an agent's output reaches into how it is tested (verdict `spoof`)
    witness     a second account of the test run, from a process the run cannot write to
    integrity   what the witness's record says (verdict `suspect` when integrity is not shown)
    record      the verdict with its evidence, saved beside the grading logs

Every verifier here runs in a fresh sandbox of the task's pristine image that receives only
what the task's format names as the agent's output; `shared` (the agent's own sandbox) only
where a task asks for it, and then reported as such.
"""
