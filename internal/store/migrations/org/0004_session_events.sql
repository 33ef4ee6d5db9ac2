-- The live logs of named sessions (narration). seq is unique per session and
-- grows; it is the SSE event id a follower resumes from.
CREATE TABLE session_events (
	org     TEXT NOT NULL,
	session TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	kind    TEXT NOT NULL,
	data    BLOB NOT NULL,
	at      INTEGER NOT NULL,
	PRIMARY KEY (org, session, seq)
);
