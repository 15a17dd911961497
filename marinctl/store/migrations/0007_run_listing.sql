-- 0007: what W&B's run listing last said of a run, so a project sync can tell from the listing
-- alone which runs moved: `updated_at` (W&B's updatedAt) and `listing_digest`, a fingerprint of
-- the whole listed node (state, heartbeat, line count, last step, config, summary, tags).
-- NULL for runs synced before this migration and for local runs: such a run counts as moved once.

ALTER TABLE runs ADD COLUMN updated_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN listing_digest VARCHAR;
