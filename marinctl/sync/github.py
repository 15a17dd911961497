"""Mirror GitHub issues, comments, commits, logbooks and files into the store as events.

Resumable and cheap to repeat: every page is fetched with the ETag stored for its URL
(store/state.py), and a page's events and its new ETag land in one transaction. An
unchanged page costs a 304 with no body; a sync stopped by a rate limit restarts from page
1, gets 304s for what it already has, and continues where it stopped — no gaps, and stable
event ids make every write an upsert, never a duplicate. Each comments page keeps the ids it
listed with its ETag, so a complete listing knows every comment GitHub still has: the ones
deleted upstream are removed from the timeline.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from marinctl.domain import Event, Progress
from marinctl.sources import github_events as gh
from marinctl.sources.github import PER_PAGE, GitHubClient, page_number, with_page
from marinctl.store import Store, events, repo_files, state


def sync_github(store: Store, spec: str, *, progress: Progress | None = None,
                client: GitHubClient | None = None, min_interval: float = 0.0, realign: bool = True) -> int:
    """Mirror one spec; returns how many events were added or changed.

    `min_interval` (seconds) skips the network when this spec was checked more recently
    than that — for `sync --follow` and `watch`, where anonymous 304s still count
    against GitHub's 60 requests/hour. Ends by re-aligning every event (even after all
    304s: runs may have arrived since) unless `realign` is off (sync_targets does it once).
    """
    from marinctl.sync.derive import realign_events

    target = gh.parse_spec(spec)
    own = client is None
    job = _Job(store, client or GitHubClient(), target, progress)
    try:
        if min_interval > 0:
            with store.connect() as con:
                if state.checked_within(con, spec, min_interval):
                    return 0
        if target.number is not None:
            job.issue(target.number)
        elif target.label is not None:
            job.label(target.label)
        else:
            job.commits(target.path)
            if not target.is_dir:
                job.file(target.path)
    finally:
        if own:
            job.client.close()
    with store.transaction() as con:
        state.mark_checked(con, spec)
    if realign:
        realign_events(store)
    return job.changed


class _Job:
    """One spec's pages: fetched conditionally, decoded by the source, written with their ETag."""

    def __init__(self, store: Store, client: GitHubClient, target: gh.GitHubSpec, progress: Progress | None):
        self.store, self.client, self.t, self.progress = store, client, target, progress
        self.repo = target.full
        self.changed = 0
        self.pages = 0

    def fetch(self, url: str, decode: Callable[[Any], Iterable[Event] | gh.FilePage], *, paginated: bool,
              listed: list[str] | None = None) -> None:
        """GET `url` (and its next pages) conditionally; a 200's events land with its ETag.

        `listed` gathers the event ids every page holds now (a 304 page: the ids stored with
        its ETag; a page stored without them is asked for again in full).
        """
        current: str | None = url
        seen: set[str] = set()
        while current and current not in seen:
            seen.add(current)
            with self.store.connect() as con:
                etag, extra = state.etag(con, current)
            if listed is not None and "ids" not in extra:
                etag = None
            page = self.client.get(current, etag=etag)
            self.pages += 1
            if self.progress:
                self.progress(f"github {self.repo}", self.pages, self.pages)
            if page.status == 304:
                if listed is not None:
                    listed += extra.get("ids") or []
                nxt = extra.get("next")
                if paginated and not nxt and (extra.get("count") or 0) >= (extra.get("per_page") or PER_PAGE):
                    nxt = with_page(current, page_number(current) + 1)  # a full last page: the list may have grown
                current = nxt if paginated else None
                continue
            found = decode(page.data)
            with self.store.transaction() as con:
                if isinstance(found, gh.FilePage):
                    repo_files.save(con, self.repo, found.path, found.sha, found.text, found.url)
                    found = found.events
                found = list(found)
                self.changed += sum(events.upsert(con, ev) for ev in found)
                count = len(page.data) if isinstance(page.data, list) else None
                facts = {"next": page.next_url, "count": count, "per_page": PER_PAGE}
                if listed is not None:
                    facts["ids"] = [ev.event_id for ev in found]
                    listed += facts["ids"]
                state.save_etag(con, current, page.etag, facts)
            current = page.next_url if paginated else None

    def issue(self, number: int) -> None:
        self.fetch(gh.issue_url(self.client, self.repo, number), lambda data: [gh.issue_event(self.repo, data)],
                   paginated=False)
        self.comments(number)

    def comments(self, number: int) -> None:
        """An issue's comments; once every page was read, comments deleted on GitHub leave the store."""
        listed: list[str] = []
        self.fetch(gh.comments_url(self.client, self.repo, number),
                   lambda data: [gh.comment_event(self.repo, number, c) for c in data or []], paginated=True,
                   listed=listed)
        with self.store.transaction() as con:
            self.changed += events.remove_comments_except(con, gh.comment_prefix(self.repo, number), listed)

    def label(self, label: str) -> None:
        numbers: list[int] = []

        def decode(data):
            numbers.extend(i["number"] for i in data or [] if i.get("comments"))
            return [gh.issue_event(self.repo, i) for i in data or []]

        self.fetch(gh.label_url(self.client, self.repo, label), decode, paginated=True)
        for n in numbers:
            self.comments(n)
        # On a 304 the list is unchanged, but comments may still have arrived: check each
        # stored issue of this label conditionally (each costs a 304 when unchanged).
        with self.store.connect() as con:
            stored = [int(f["number"]) for f in events.issue_fields(con, self.repo)
                      if label in (f.get("labels") or []) and f.get("comments")]
        for n in stored:
            if n not in numbers:
                self.comments(n)

    def commits(self, path: str) -> None:
        self.fetch(gh.commits_url(self.client, self.repo, path),
                   lambda data: [gh.commit_event(self.repo, c, path) for c in data or []], paginated=True)

    def file(self, path: str) -> None:
        self.fetch(gh.contents_url(self.client, self.repo, path), lambda data: gh.file_page(self.repo, path, data),
                   paginated=False)
