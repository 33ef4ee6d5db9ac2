-- Lease-seconds per class, recorded when a lease ends (live leases are added
-- at read time).
CREATE TABLE usage (
	org      TEXT NOT NULL,
	class    TEXT NOT NULL,
	leases   INTEGER NOT NULL DEFAULT 0,
	lease_ms INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (org, class)
);
