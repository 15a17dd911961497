-- 0003: W&B's exported parquet parts kept as the stored form of finished history.
--
-- A part is one exported file, kept unchanged under `<db name>.history/<run hash>/` and used
-- for the steps [lo, hi) of its run (store/parts.py). No long row of a run lies inside one of
-- its parts' ranges and one run's parts never overlap, so a history read is a plain union of
-- the parts and `metrics` (store/scan.py). What every read would otherwise decode a whole part
-- for — which keys it holds, their first/last values, their NaN/Inf — is computed once when
-- the part is registered (or clipped) and kept in `part_keys` and `part_nonfinite`.
-- No primary keys: a clip deletes a part's rows and inserts its piece in one transaction, and
-- part ids come from a sequence, so rows are unique by construction.

CREATE SEQUENCE part_id_seq START 1;

CREATE TABLE history_parts (
    part_id    INTEGER NOT NULL,
    run_pk     INTEGER NOT NULL,
    file       VARCHAR NOT NULL,   -- path under the store's history folder
    lo         BIGINT  NOT NULL,   -- the steps this part is used for: [lo, hi)
    hi         BIGINT  NOT NULL,
    file_lo    BIGINT,             -- the steps the file holds: [file_lo, file_hi)
    file_hi    BIGINT,
    first_step BIGINT,             -- first and last step with a value inside [lo, hi)
    last_step  BIGINT,
    num_rows   BIGINT,
    bytes      BIGINT,             -- the file's size when registered (a shorter file is treated as lost)
    sorted     BOOLEAN,            -- `_step` strictly increasing in file order (export streams it as is)
    registered_at TIMESTAMPTZ DEFAULT current_timestamp
);

-- Per key and part, over the part's [lo, hi): how many values, where they start and end.
CREATE TABLE part_keys (
    part_id           INTEGER NOT NULL,
    key_id            INTEGER NOT NULL,
    n_values          BIGINT,
    first_step        BIGINT,     -- any value, NaN/Inf included
    last_step         BIGINT,
    first_finite_step BIGINT,
    first_finite      DOUBLE,
    last_finite_step  BIGINT,
    last_finite       DOUBLE,
    min_value         DOUBLE      -- NaN ignored, -Inf kept (DuckDB's min)
);

-- Every NaN/Inf value inside a part's [lo, hi) (rare; `anomalies`' nonfinite detector reads these).
CREATE TABLE part_nonfinite (
    part_id INTEGER NOT NULL,
    key_id  INTEGER NOT NULL,
    step    BIGINT  NOT NULL,
    value   DOUBLE
);
