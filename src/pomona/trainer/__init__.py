"""The trainer: recorded calls to SFT and RL data, credit by branching, and CPU training.

    from pomona.trainer import episodes, samples, export
    eps = episodes.load("pomona-runs", episodes.Filters(resolved=True))
    for s in samples.samples(eps[0], tokenizer):    # one token sample per branch
        ...
    export.export("sft", "pomona-runs", "trl", "out/")

Modules: episodes (loading), graph (the token-exact trajectory graph: branches, lineage,
conversations), samples (one token sample per branch, drift), onpolicy (trained tokens sampled
under the proxy's pinned sampling), advantages (group
advantages), bar (Balanced Adaptive Rollout), branching (credit measured by branching),
export (hf, trl, verl, slime, orchard), orchard (the Orchard dataset's schemas), train (SFT
with TRL, a policy-gradient step), tiny (a tiny model and tokenizer made offline).
Nothing here imports torch until a function that trains or generates is called.
"""
