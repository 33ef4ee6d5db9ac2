-- What an org's session logs hold on disk, kept with every append and trim
-- so the per-org bound is checked without summing the table. The index
-- finds an org's oldest events across its sessions.
CREATE TABLE event_bytes (
	org   TEXT PRIMARY KEY,
	bytes INTEGER NOT NULL
);
INSERT INTO event_bytes (org, bytes)
	SELECT org, SUM(length(data) + length(session) + length(kind)) FROM session_events GROUP BY org;
CREATE INDEX session_events_by_seq ON session_events (org, seq);
