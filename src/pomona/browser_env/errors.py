"""What can go wrong in a browser episode, typed the way episodes record failures.

A browser that crashed or a page that never answers is the environment's fault, not the agent's:
those are infra failures (`kind` is one of the trajectory store's failure kinds) and an episode
ending on one gets no reward at all, never a 0. A malformed action is the agent's own doing and
is only reported back in the next observation.
"""

from __future__ import annotations

from pomona.errors import EpisodeFailure, FailureKind, PomonaError


class BrowserInfraError(EpisodeFailure, RuntimeError):
    """The browser environment failed under the agent; `kind` goes to `episodes.failure_kind`."""

    kind: FailureKind = "sandbox"


class BrowserCrashed(BrowserInfraError):
    """Chromium (or its sandbox) died, or the connection to its DevTools endpoint broke."""

    kind: FailureKind = "sandbox"


class PageHung(BrowserInfraError):
    """A page did not finish loading, or stopped answering, within the page timeout even after
    the retries that were safe to make."""

    kind: FailureKind = "timeout"


class ActionError(PomonaError, ValueError):
    """An action that does not parse or names no element on the page; the message says what a
    well-formed action looks like."""


class NavigationFailed(ActionError):
    """A page the agent went to could not be loaded (refused, unresolvable, reset): the web's
    answer, not the environment's failure. The browser shows its error page, and the agent is
    told what happened, as a person at the browser would be."""
