-- 0008: an alert's delivery to each sink, one row per (alert, sink): a sink that failed is tried
-- again alone, and one that accepted the alert is never sent it again, whichever follower process
-- (or restart) delivers it. `sink` names the sink without its secret: its kind and a digest of its
-- URL, key or command ('slack:3f0c…'); the target itself is never stored. A follower holds the
-- rows it is delivering (`claimed_by`, `claimed_until`, renewed at each try); a row whose claim
-- lapsed (its follower stopped) is taken by the next follower with the same sink.
-- Written for DuckLake too: no sequence, no key constraint, no default; store/alerts.py keeps one
-- row per (alert_id, sink) inside its transactions.

CREATE TABLE alert_deliveries (
    alert_id      BIGINT NOT NULL,           -- alerts.alert_id
    sink          VARCHAR NOT NULL,          -- kind:digest of the target
    kind          VARCHAR NOT NULL,          -- webhook, slack, discord, exec, desktop, …
    tries         INTEGER NOT NULL,
    last_error    VARCHAR,                   -- why the last try failed (naming no secret)
    tried_at      TIMESTAMPTZ,
    delivered_at  TIMESTAMPTZ,               -- when this sink accepted it
    claimed_by    VARCHAR,                   -- the delivering process ('host:pid')
    claimed_until TIMESTAMPTZ
);
