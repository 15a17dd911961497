-- 0002: repository files mirrored from GitHub (mixture JSON, logbooks, configs).
--
-- The raw text at the ref it was read from, so `marinctl mix` can read the hero mixture
-- offline and a re-sync can tell (by blob sha / ETag) that nothing changed.

CREATE TABLE repo_files (
    repo       VARCHAR NOT NULL,   -- 'owner/name'
    path       VARCHAR NOT NULL,   -- path inside the repository
    ref        VARCHAR,            -- branch/tag/sha asked for (NULL: default branch)
    sha        VARCHAR,            -- git blob sha of the content
    content    VARCHAR,
    url        VARCHAR,            -- html_url on github.com
    fetched_at TIMESTAMPTZ DEFAULT current_timestamp,
    PRIMARY KEY (repo, path)
);
