"""Test doubles that speak the real wire protocols, for Pomona's tests and anyone else's.

`FakeUpstream` is a named stand-in for a model service (vLLM, the Anthropic API, the OpenAI
Responses API) that cannot be reached here: it serves one dialect on the wire, answers with
the scripted model, and fails on request in the ways real upstreams do.
"""

from pomona.proxy.testing.upstreams import FakeUpstream, Seen

__all__ = ["FakeUpstream", "Seen"]
