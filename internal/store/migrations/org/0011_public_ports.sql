-- The ports of a sandbox whose previews need no key or link, as the lease
-- asked and the operator allowed (--public-previews): a JSON array of
-- port numbers; empty is none.
ALTER TABLE sandboxes ADD COLUMN public_ports TEXT NOT NULL DEFAULT '';
