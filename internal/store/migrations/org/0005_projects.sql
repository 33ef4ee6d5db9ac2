-- The projects whose volume the org keeps: from the first lease in a project
-- until its volume is purged. size_mib is the volume's bound (its class's),
-- which the disk quota counts. Projects of rows still here are backfilled at
-- their class's size of this release.
CREATE TABLE projects (
	org          TEXT NOT NULL,
	name         TEXT NOT NULL,
	volume       TEXT NOT NULL,
	size_mib     INTEGER NOT NULL,
	created_at   INTEGER NOT NULL,
	last_used_at INTEGER NOT NULL,
	PRIMARY KEY (org, name)
);
INSERT OR IGNORE INTO projects (org, name, volume, size_mib, created_at, last_used_at)
	SELECT org, project, volume,
		CASE class WHEN 'exec' THEN 512 WHEN 'android' THEN 20480 ELSE 10240 END,
		MIN(created_at), MAX(last_used_at)
	FROM sandboxes WHERE project != '' GROUP BY org, project;
