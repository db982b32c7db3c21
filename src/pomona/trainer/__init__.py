"""The trainer: recorded calls to SFT and RL data, credit by branching, and CPU training.

    from pomona.trainer import episodes, samples, export
    eps = episodes.load("pomona-runs", episodes.Filters(resolved=True))
    for s in samples.samples(eps[0], tokenizer):    # merged or per-call token samples
        ...
    export.export("sft", "pomona-runs", "trl", "out/")

Modules: episodes (loading), samples (merge / per-call rules, drift), advantages (group
advantages), bar (Balanced Adaptive Rollout), branching (credit measured by branching),
export (hf, trl, verl, slime, orchard), orchard (the Orchard dataset's schemas), train (SFT
with TRL, a policy-gradient step), tiny (a tiny model and tokenizer made offline).
Nothing here imports torch until a function that trains or generates is called.
"""
