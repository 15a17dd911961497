-- 0006: alerts fired while following (`sync --follow`, `watch`): one row per run, cause and
-- episode, with its delivery state. The UNIQUE key is what makes an alert fire once across
-- restarts, re-syncs and a second follower process: a second insert of the same episode fails
-- inside its transaction and is read as "already fired". `claimed_by`/`claimed_until` let one
-- follower at a time deliver an alert (a lease, renewed at each try); `delivered_at` stays NULL
-- until a sink accepts it. Sink URLs are secrets (Slack and Discord put the key in the path):
-- only a sink's kind is stored.

CREATE SEQUENCE alert_id_seq START 1;

CREATE TABLE alerts (
    alert_id      BIGINT PRIMARY KEY DEFAULT nextval('alert_id_seq'),
    run_uid       VARCHAR NOT NULL,          -- runs.uid
    cause         VARCHAR NOT NULL,          -- what the episode is of: a cause class, 'stale', 'crashed', 'nonfinite:<key>', 'rule:<name>'
    episode_start BIGINT NOT NULL,           -- its first step (with run_uid and cause: the alert's identity)
    episode_end   BIGINT NOT NULL,           -- its last step seen so far
    step          BIGINT NOT NULL,           -- the step to explain (an incident's peak)
    metric        VARCHAR,
    kind          VARCHAR NOT NULL,          -- detection kind, 'stale', 'crashed', 'nonfinite', 'threshold', 'change', 'zscore'
    cause_class   VARCHAR NOT NULL,
    severity      VARCHAR NOT NULL,          -- 'high' | 'medium' | 'low'
    title         VARCHAR NOT NULL,
    summary       VARCHAR,
    command       VARCHAR NOT NULL,          -- marinctl explain step N --run RUN
    details       JSON,
    fired_at      TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    delivered_at  TIMESTAMPTZ,               -- when the first sink accepted it
    delivered_to  VARCHAR,                   -- the kinds of the sinks that accepted it, comma-separated
    tries         INTEGER NOT NULL DEFAULT 0,
    last_error    VARCHAR,
    claimed_by    VARCHAR,                   -- the delivering process ('host:pid')
    claimed_until TIMESTAMPTZ,
    UNIQUE (run_uid, cause, episode_start)
);
