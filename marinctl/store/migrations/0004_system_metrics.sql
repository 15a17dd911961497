-- 0004: system metrics W&B records beside the history (CPU, memory, GPU, disk, network …).
--
-- They are sampled by wall time, not logged at steps, so they are kept apart from `metrics`:
-- one row per (run, key, time). Keys are W&B's remote spelling (`system.cpu`,
-- `system.gpu.0.gpu`: the `.wandb` file's `cpu` with the `system.` prefix W&B's server adds)
-- and are interned in their own small table, so `metric_keys` keeps listing history keys only.
-- No primary key (a long local run holds millions of samples): local windows are written in
-- the transaction that moves the file's read position, and a window read again replaces its
-- own (key, time) samples; a remote run's sampled set is replaced whole (store/system.py).

CREATE SEQUENCE system_key_seq START 1;

CREATE TABLE system_keys (
    key_id INTEGER PRIMARY KEY DEFAULT nextval('system_key_seq'),
    key    VARCHAR NOT NULL UNIQUE
);

CREATE TABLE system_samples (
    run_pk INTEGER NOT NULL,
    key_id INTEGER NOT NULL,
    time   DOUBLE  NOT NULL,   -- unix seconds (W&B's `_timestamp`, the stats record's timestamp)
    value  DOUBLE
);

-- A remote run's sampled set: what run metadata (state, heartbeat, last step) it was fetched
-- for, so an unchanged run is not asked again and a sync killed before the set landed asks again.
CREATE TABLE system_fetches (
    run_pk      INTEGER PRIMARY KEY,
    fetched_for VARCHAR,
    samples     BIGINT,            -- sample rows W&B returned (its `events(samples:)` is sampled)
    fetched_at  TIMESTAMPTZ DEFAULT current_timestamp
);
