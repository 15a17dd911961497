-- The schema of migrations 0001–0007, as a DuckLake catalog takes it: the same tables and
-- columns in the same order, without what DuckLake does not have (sequences, PRIMARY KEY,
-- UNIQUE, DEFAULT nextval). Ids and uniqueness are kept by the store functions instead, under
-- the lake's writer lock (store/lake.py): a new id is the column's max + 1, an upsert is a
-- delete and an insert in one transaction. Migrations from 0008 on are plain CREATE TABLE /
-- ALTER TABLE … ADD COLUMN and apply to both kinds of store as they are (store/schema.py).

CREATE TABLE runs (
    run_pk             INTEGER NOT NULL,
    uid                VARCHAR NOT NULL,
    source             VARCHAR NOT NULL,
    entity             VARCHAR,
    project            VARCHAR,
    run_id             VARCHAR NOT NULL,
    name               VARCHAR,
    run_group          VARCHAR,
    job_type           VARCHAR,
    tags               VARCHAR[],
    state              VARCHAR,
    created_at         TIMESTAMPTZ,
    heartbeat_at       TIMESTAMPTZ,
    config             JSON,
    summary            JSON,
    fork_parent        VARCHAR,
    fork_step          BIGINT,
    last_step          BIGINT,
    remote_last_step   BIGINT,
    history_line_count BIGINT,
    path               VARCHAR,
    url                VARCHAR,
    synced_at          TIMESTAMPTZ,
    environment        JSON,
    updated_at         TIMESTAMPTZ,
    listing_digest     VARCHAR
);

CREATE TABLE metric_keys (
    key_id INTEGER NOT NULL,
    key    VARCHAR NOT NULL
);

CREATE TABLE metrics (
    run_pk INTEGER NOT NULL,
    key_id INTEGER NOT NULL,
    step   BIGINT  NOT NULL,
    value  DOUBLE
);

CREATE TABLE sync_state (
    scope      VARCHAR NOT NULL,
    name       VARCHAR NOT NULL,
    position   BIGINT,
    token      VARCHAR,
    extra      JSON,
    updated_at TIMESTAMPTZ DEFAULT current_timestamp
);

CREATE TABLE events (
    event_id VARCHAR NOT NULL,
    source   VARCHAR NOT NULL,
    kind     VARCHAR NOT NULL,
    time     TIMESTAMPTZ,
    title    VARCHAR,
    author   VARCHAR,
    url      VARCHAR,
    body     VARCHAR,
    run_uid  VARCHAR,
    step     BIGINT,
    fields   JSON
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

CREATE TABLE repo_files (
    repo       VARCHAR NOT NULL,
    path       VARCHAR NOT NULL,
    ref        VARCHAR,
    sha        VARCHAR,
    content    VARCHAR,
    url        VARCHAR,
    fetched_at TIMESTAMPTZ DEFAULT current_timestamp
);

CREATE TABLE history_parts (
    part_id    INTEGER NOT NULL,
    run_pk     INTEGER NOT NULL,
    file       VARCHAR NOT NULL,
    lo         BIGINT  NOT NULL,
    hi         BIGINT  NOT NULL,
    file_lo    BIGINT,
    file_hi    BIGINT,
    first_step BIGINT,
    last_step  BIGINT,
    num_rows   BIGINT,
    bytes      BIGINT,
    sorted     BOOLEAN,
    registered_at TIMESTAMPTZ DEFAULT current_timestamp
);

CREATE TABLE part_keys (
    part_id           INTEGER NOT NULL,
    key_id            INTEGER NOT NULL,
    n_values          BIGINT,
    first_step        BIGINT,
    last_step         BIGINT,
    first_finite_step BIGINT,
    first_finite      DOUBLE,
    last_finite_step  BIGINT,
    last_finite       DOUBLE,
    min_value         DOUBLE
);

CREATE TABLE part_nonfinite (
    part_id INTEGER NOT NULL,
    key_id  INTEGER NOT NULL,
    step    BIGINT  NOT NULL,
    value   DOUBLE
);

CREATE TABLE system_keys (
    key_id INTEGER NOT NULL,
    key    VARCHAR NOT NULL
);

CREATE TABLE system_samples (
    run_pk INTEGER NOT NULL,
    key_id INTEGER NOT NULL,
    time   DOUBLE  NOT NULL,
    value  DOUBLE
);

CREATE TABLE system_fetches (
    run_pk      INTEGER NOT NULL,
    fetched_for VARCHAR,
    samples     BIGINT,
    fetched_at  TIMESTAMPTZ DEFAULT current_timestamp
);

CREATE TABLE alerts (
    alert_id      BIGINT NOT NULL,
    run_uid       VARCHAR NOT NULL,
    cause         VARCHAR NOT NULL,
    episode_start BIGINT NOT NULL,
    episode_end   BIGINT NOT NULL,
    step          BIGINT NOT NULL,
    metric        VARCHAR,
    kind          VARCHAR NOT NULL,
    cause_class   VARCHAR NOT NULL,
    severity      VARCHAR NOT NULL,
    title         VARCHAR NOT NULL,
    summary       VARCHAR,
    command       VARCHAR NOT NULL,
    details       JSON,
    fired_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    delivered_at  TIMESTAMPTZ,
    delivered_to  VARCHAR,
    tries         INTEGER NOT NULL DEFAULT 0,
    last_error    VARCHAR,
    claimed_by    VARCHAR,
    claimed_until TIMESTAMPTZ
);
