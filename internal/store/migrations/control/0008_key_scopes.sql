-- A key has a scope: 'tenant' (the org's sandboxes) or 'admin' (also the
-- org's keys, and with the operator org the operator routes). The column
-- defaults to the lesser scope, so a row written without one is never an
-- admin; but every key that exists now held every power its org had, and an
-- upgrade must not lock an operator out of the routes it used, so the rows
-- already here become admin.
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'tenant' CHECK (scope IN ('tenant', 'admin'));
UPDATE api_keys SET scope = 'admin';
