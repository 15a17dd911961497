-- 0001: runs, metric history at full resolution, sync watermarks, events, anomalies.
--
-- Metrics are stored long (one row per run/key/step) with integer run and key ids:
-- a hero-sized run is ~84M values, so a VARCHAR per row would cost gigabytes.
-- Writers insert each batch ordered by (key_id, step), so DuckDB's row-group zone maps
-- let a single-series query skip almost everything (see store/metrics.py).
-- There is deliberately no primary key on metrics (an 84M-entry ART index costs GBs):
-- uniqueness comes from watermarks — every batch deletes [lo, hi) for its run and keys
-- before inserting, in the same transaction.

CREATE SEQUENCE run_pk_seq START 1;
CREATE SEQUENCE key_id_seq START 1;

CREATE TABLE runs (
    run_pk             INTEGER PRIMARY KEY DEFAULT nextval('run_pk_seq'),
    uid                VARCHAR NOT NULL UNIQUE,  -- 'entity/project/run_id' (cloud) or 'local:<run_id>'
    source             VARCHAR NOT NULL,         -- 'wandb' | 'local' | 'repro'
    entity             VARCHAR,
    project            VARCHAR,
    run_id             VARCHAR NOT NULL,         -- the W&B run id (node.name)
    name               VARCHAR,                  -- displayName
    run_group          VARCHAR,
    job_type           VARCHAR,
    tags               VARCHAR[],
    state              VARCHAR,
    created_at         TIMESTAMPTZ,
    heartbeat_at       TIMESTAMPTZ,
    config             JSON,
    summary            JSON,
    fork_parent        VARCHAR,                  -- parent run_id when forked (fork_from=parent?_step=N)
    fork_step          BIGINT,
    last_step          BIGINT,                   -- last history step stored locally
    remote_last_step   BIGINT,                   -- historyKeys.lastStep when last seen
    history_line_count BIGINT,
    path               VARCHAR,                  -- local .wandb file for local runs
    url                VARCHAR,
    synced_at          TIMESTAMPTZ
);

CREATE TABLE metric_keys (
    key_id INTEGER PRIMARY KEY DEFAULT nextval('key_id_seq'),
    key    VARCHAR NOT NULL UNIQUE
);

CREATE TABLE metrics (
    run_pk INTEGER NOT NULL,
    key_id INTEGER NOT NULL,
    step   BIGINT  NOT NULL,
    value  DOUBLE
);

-- Generic resumable positions: history watermark per run, byte offset per .wandb file,
-- ETag per GitHub URL, run-list watermark per project...
CREATE TABLE sync_state (
    scope      VARCHAR NOT NULL,   -- e.g. 'history', 'wandb_file', 'github', 'runs_list'
    name       VARCHAR NOT NULL,   -- run uid, file path, URL, entity/project
    position   BIGINT,
    token      VARCHAR,            -- cursor / ETag / file identity
    extra      JSON,
    updated_at TIMESTAMPTZ DEFAULT current_timestamp,
    PRIMARY KEY (scope, name)
);

CREATE TABLE events (
    event_id VARCHAR PRIMARY KEY,  -- stable: 'github:owner/repo#N', '...#N/comment/ID', 'commit:SHA', 'output:<run>:<n>'
    source   VARCHAR NOT NULL,     -- 'github' | 'wandb' | 'local' | 'logbook'
    kind     VARCHAR NOT NULL,     -- issue | comment | commit | logbook | console | status ...
    time     TIMESTAMPTZ,
    title    VARCHAR,
    author   VARCHAR,
    url      VARCHAR,
    body     VARCHAR,
    run_uid  VARCHAR,              -- aligned run (uid), if known
    step     BIGINT,               -- aligned step, if known
    fields   JSON                  -- structured facts (sha, fork point, checkpoint ...)
);

CREATE TABLE anomalies (
    run_pk      INTEGER NOT NULL,
    step        BIGINT NOT NULL,
    metric      VARCHAR NOT NULL,
    kind        VARCHAR NOT NULL,
    score       DOUBLE,
    cause_class VARCHAR,
    details     JSON,
    detected_at TIMESTAMPTZ DEFAULT current_timestamp
);
