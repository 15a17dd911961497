"""marinctl's GitHub REST client against the loopback test server, checked with PyGithub."""

from __future__ import annotations

import time

import pytest

from marinctl.errors import RuntimeFailure, UserError
from marinctl.sources.github import GitHubClient, RateLimitStop

REPO = "acme/widgets"


@pytest.fixture
def gh(github_server):
    server = github_server()
    server.add_issue(REPO, 7, "[Hero run] test issue (synthetic)", "body with `step-100`", labels=("hero-run",))
    for i in range(230):
        server.add_comment(REPO, 7, f"comment {i}", created_at=f"2026-08-20T{i // 60:02d}:{i % 60:02d}:00Z")
    server.add_issue(REPO, 8, "unrelated", "x", labels=("bug",))
    server.add_commit(REPO, "a" * 40, "mix: first\n\nbody", paths=("exp/mix.json",), date="2026-08-18T10:00:00Z")
    server.add_commit(REPO, "b" * 40, "other file", paths=("exp/other.py",), date="2026-08-19T10:00:00Z")
    server.add_commit(REPO, "c" * 40, "mix: second", paths=("exp/mix.json", "exp/other.py"), date="2026-08-20T10:00:00Z")
    server.set_file(REPO, "exp/mix.json", '{"phase0_weights": {"a": 1.0}}\n')
    return server


def test_issue_comments_labels_commits_contents(gh):
    with GitHubClient(gh.url) as c:
        issue = c.issue("acme", "widgets", 7)
        comments = c.comments("acme", "widgets", 7)
        labelled = c.issues_by_label("acme", "widgets", "hero-run")
        commits = c.commits("acme", "widgets", path="exp/mix.json")
        text, sha = c.file_text("acme", "widgets", "exp/mix.json")
    assert issue["title"] == "[Hero run] test issue (synthetic)"
    assert [x["body"] for x in comments] == [f"comment {i}" for i in range(230)]
    assert [i["number"] for i in labelled] == [7]
    assert [x["sha"] for x in commits] == ["c" * 40, "a" * 40]  # newest first, only those touching the path
    assert text == '{"phase0_weights": {"a": 1.0}}\n' and len(sha) == 40
    comment_pages = [p for p, s, _ in gh.requests if "/comments" in p]
    assert len(comment_pages) == 3  # 100 + 100 + 30, following Link rel=next


def test_pygithub_reads_the_same_issue_comments_and_commits(gh):
    """A client nobody here wrote agrees with the server's shapes and with marinctl."""
    from github import Github

    g = Github(base_url=gh.url, auth=None, per_page=100, retry=None)
    try:
        repo = g.get_repo(REPO)
        issue = repo.get_issue(7)
        theirs = [(c.id, c.body, c.user.login) for c in issue.get_comments()]
        their_commits = [c.sha for c in repo.get_commits(path="exp/mix.json")]
        their_file = repo.get_contents("exp/mix.json").decoded_content.decode()
        labels = [lab.name for lab in issue.labels]
        their_title, their_created = issue.title, issue.created_at
    finally:
        g.close()
    with GitHubClient(gh.url) as c:
        ours = [(x["id"], x["body"], x["user"]["login"]) for x in c.comments("acme", "widgets", 7)]
        our_commits = [x["sha"] for x in c.commits("acme", "widgets", path="exp/mix.json")]
        our_file, _ = c.file_text("acme", "widgets", "exp/mix.json")
    assert theirs == ours and len(ours) == 230
    assert their_commits == our_commits == ["c" * 40, "a" * 40]
    assert their_file == our_file
    assert labels == ["hero-run"] and their_title.startswith("[Hero run]")
    assert their_created.year == 2026


def test_etag_gives_304_with_no_body(gh):
    with GitHubClient(gh.url) as c:
        first = c.get(c.url("repos/acme/widgets/issues/7"))
        assert first.status == 200 and first.etag
        gh.reset_counters()
        again = c.get(c.url("repos/acme/widgets/issues/7"), etag=first.etag)
    assert again.status == 304 and again.data is None
    assert gh.statuses() == [304] and gh.body_bytes == 0


def test_token_is_sent_and_never_shown(gh, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_SECRET_for_tests")
    with GitHubClient(gh.url) as c:
        c.issue("acme", "widgets", 7)
        with pytest.raises(UserError) as err:
            c.issue("acme", "widgets", 999)
    assert gh.auth_headers[0] == "Bearer ghp_SECRET_for_tests"
    assert "SECRET" not in err.value.message and "SECRET" not in (err.value.hint or "")


def test_gh_token_and_api_url_from_environment(gh, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", "gho_other")
    monkeypatch.setenv("GITHUB_API_URL", gh.url + "/")
    with GitHubClient() as c:
        assert c.base_url == gh.url
        c.issue("acme", "widgets", 7)
    assert gh.auth_headers == ["Bearer gho_other"]


def test_anonymous_by_default(gh):
    with GitHubClient(gh.url) as c:
        c.issue("acme", "widgets", 7)
    assert gh.auth_headers == [None]


def test_primary_limit_short_reset_is_waited_out(gh):
    gh.exhaust(reset_in=1.2)
    with GitHubClient(gh.url, max_wait=10) as c:
        t0 = time.monotonic()
        issue = c.issue("acme", "widgets", 7)
        elapsed = time.monotonic() - t0
    assert issue["number"] == 7
    assert c.waited > 0 and elapsed >= 1.0
    assert gh.statuses() == [403, 200]


def test_primary_limit_long_reset_stops_with_the_time(gh):
    gh.exhaust(reset_in=1800)
    with GitHubClient(gh.url, max_wait=5) as c:
        with pytest.raises(RateLimitStop) as err:
            c.issue("acme", "widgets", 7)
    assert "rate limit" in err.value.message and "resets at" in err.value.message
    assert "again after" in err.value.hint and "GITHUB_TOKEN" in err.value.hint
    assert abs(err.value.retry_at.timestamp() - gh.reset_at) < 5
    assert isinstance(err.value, RuntimeFailure)


@pytest.mark.parametrize("status", [403, 429])
def test_secondary_limit_retry_after(gh, status):
    gh.queue_secondary(status, retry_after=1)
    with GitHubClient(gh.url, max_wait=5) as c:
        assert c.issue("acme", "widgets", 7)["number"] == 7
        assert c.waited == pytest.approx(1.0)
    gh.queue_secondary(status, retry_after=900)
    with GitHubClient(gh.url, max_wait=5) as c:
        with pytest.raises(RateLimitStop, match="secondary rate limit"):
            c.issue("acme", "widgets", 7)


def test_network_down_is_a_runtime_failure():
    with GitHubClient("http://127.0.0.1:9", max_attempts=2, sleep=lambda s: None) as c:
        with pytest.raises(RuntimeFailure, match="kept failing"):
            c.issue("acme", "widgets", 7)
