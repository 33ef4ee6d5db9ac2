-- A sandbox's egress policy as its answer reports it (netpolicy.Policy, a
-- JSON object); empty is none, the sandbox's own loopback only.
ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '';
