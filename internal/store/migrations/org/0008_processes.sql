-- The record of each background process a sandbox ran: what was started,
-- and its end once the server learned it. The sandbox's init keeps the
-- live state (and the output); this copy outlives the init (a sandbox that
-- died, a server restart) and goes with the sandbox's row. A pid is unique
-- only within one boot of the sandbox's init.
CREATE TABLE processes (
	org        TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	boot       TEXT NOT NULL,
	pid        INTEGER NOT NULL,
	argv       TEXT NOT NULL,
	dir        TEXT NOT NULL,
	tty        INTEGER NOT NULL DEFAULT 0,
	session    TEXT NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL,
	ended_at   INTEGER,
	exit_code  INTEGER,
	signal     INTEGER NOT NULL DEFAULT 0,
	timed_out  INTEGER NOT NULL DEFAULT 0,
	lost       INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (org, sandbox_id, boot, pid)
);
CREATE TRIGGER processes_go_with_their_sandbox AFTER DELETE ON sandboxes
BEGIN
	DELETE FROM processes WHERE org = OLD.org AND sandbox_id = OLD.id;
END;
