-- 0009: an alert's priority and its acknowledgement, and what a phone sink keeps to stop one.
-- `priority` is 'emergency' | 'high' | 'normal' | 'low' (NULL for alerts fired before it: read as
-- their severity's, analysis/alerts/priority.py). `acked_at` is when `marinctl alerts ack ID` was
-- run: no follower sends the alert again, and every repeat it can reach is stopped. `receipt` is
-- Pushover's receipt for an emergency it repeats until acknowledged (what cancels the repeats;
-- it opens nothing without the app's token), `cancelled_at` when that cancel was taken.
-- Written for DuckLake too: plain ADD COLUMNs, no defaults.

ALTER TABLE alerts ADD COLUMN priority VARCHAR;
ALTER TABLE alerts ADD COLUMN acked_at TIMESTAMPTZ;
ALTER TABLE alert_deliveries ADD COLUMN receipt VARCHAR;
ALTER TABLE alert_deliveries ADD COLUMN cancelled_at TIMESTAMPTZ;
