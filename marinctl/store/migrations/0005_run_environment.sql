-- 0005: the environment a run ran in (os, python, host, program, CPU, GPU, memory, disk, git …),
-- as a `.wandb` file's environment records give it (they replaced wandb-metadata.json); shown in
-- watch's run pane beside config and summary. NULL where no source has said (a run synced before
-- this migration, or a W&B run: its metadata is a file marinctl does not fetch).

ALTER TABLE runs ADD COLUMN environment JSON;
