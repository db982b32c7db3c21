"""The pages of one browser context as the agent's tabs, and what pages do on their own.

A popup or a link opened in a new tab becomes a tab, and the active one, as a browser focuses
it; past `Limits.tabs` open tabs a new page is closed at once. A dialog (alert, confirm, prompt)
is dismissed (a leave-page question accepted) so no page waits on a person. A download is listed;
past `Limits.downloads` a new one is cancelled. Each of these leaves a note, and the next
observation shows the notes gathered since the one before (`take_notes`), so the agent sees what
happened, as a person at the browser would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pomona.browser_env.errors import ActionError


@dataclass(frozen=True)
class Limits:
    tabs: int = 8
    downloads: int = 10


@dataclass(frozen=True)
class Download:
    url: str
    filename: str
    accepted: bool  # False: refused, past the limit


@dataclass
class Tabs:
    """Tracks `context`'s pages; `prepare(page)` is called on every page that is kept open."""

    context: Any
    prepare: Callable[[Any], None]
    limits: Limits = field(default_factory=Limits)
    active: Any = None
    downloads: list[Download] = field(default_factory=list)
    _notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.context.on("page", self._opened)

    @property
    def pages(self) -> list[Any]:
        return [p for p in self.context.pages if not p.is_closed()]

    def open(self) -> Any:
        """A new blank tab, made active (ActionError past the limit)."""
        if len(self.pages) >= self.limits.tabs:
            raise ActionError(
                f"{len(self.pages)} tabs are open, the most allowed: close one (tab_close) first"
            )
        return self.context.new_page()  # _opened makes it the active tab

    def focus(self, index: int) -> Any:
        pages = self.pages
        if not 0 <= index < len(pages):
            raise ActionError(f"there is no tab {index}; the tabs go from 0 to {len(pages) - 1}")
        self.active = pages[index]
        self.active.bring_to_front()
        return self.active

    def close_active(self) -> None:
        """Close the active tab; the most recent other one becomes active (a blank one when it
        was the last)."""
        if self.active is not None:
            self.active.close()  # _closed picks the next active tab
        if not self.pages:
            self.context.new_page()

    def take_notes(self) -> list[str]:
        notes, self._notes = self._notes, []
        return notes

    # --- events ------------------------------------------------------------------------------

    def _opened(self, page: Any) -> None:
        if len(self.pages) > self.limits.tabs:
            self._notes.append(
                f"a new tab ({page.url or 'about:blank'}) was closed: at most "
                f"{self.limits.tabs} tabs may be open"
            )
            page.close()
            return
        self.prepare(page)
        page.on("dialog", self._dialog)
        page.on("download", self._download)
        page.on("close", self._closed)
        if self.active is not None:
            self._notes.append(f"a new tab opened and became the active one: {page.url}")
        self.active = page

    def _closed(self, page: Any) -> None:
        if page is self.active:
            rest = self.pages
            self.active = rest[-1] if rest else None

    def _dialog(self, dialog: Any) -> None:
        leaving = dialog.type == "beforeunload"
        self._notes.append(
            f"the page showed a {dialog.type} dialog ({dialog.message!r}); it was "
            + ("accepted (leave the page)" if leaving else "dismissed")
        )
        if leaving:
            dialog.accept()
        else:
            dialog.dismiss()

    def _download(self, download: Any) -> None:
        accepted = len([d for d in self.downloads if d.accepted]) < self.limits.downloads
        self.downloads.append(Download(download.url, download.suggested_filename, accepted))
        if accepted:
            self._notes.append(f"a download started: {download.suggested_filename}")
        else:
            download.cancel()
            self._notes.append(
                f"a download ({download.suggested_filename}) was refused: at most "
                f"{self.limits.downloads} downloads per episode"
            )
