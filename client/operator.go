package client

import (
	"context"
	"github.com/sandboxd/sandbox/wire"
	"time"
)

// Usage is an org's lease count and lease-seconds of one class.
type Usage = wire.Usage

// Usage reports the org's use per class.
func (c *Client) Usage(ctx context.Context) ([]Usage, error) {
	var b struct {
		Usage []Usage `json:"usage"`
	}
	return b.Usage, c.do(ctx, request{method: "GET", path: "/v1/sandbox/usage", out: &b})
}

// Policy is a quota policy; a nil field is "the server's".
type Policy = wire.Policy

// OrgQuota is an org's override and the policy in force.
type OrgQuota = wire.OrgQuota

// OrgQuota reads an org's quota (an admin key of the operator org).
func (c *Client) OrgQuota(ctx context.Context, org string) (*OrgQuota, error) {
	var q OrgQuota
	return &q, c.do(ctx, request{method: "GET", path: "/v1/orgs/" + esc(org) + "/quota", out: &q})
}

// SetOrgQuota sets an org's override; an empty Policy clears it (an admin
// key of the operator org).
func (c *Client) SetOrgQuota(ctx context.Context, org string, p Policy) (*OrgQuota, error) {
	var q OrgQuota
	return &q, c.do(ctx, request{method: "PUT", path: "/v1/orgs/" + esc(org) + "/quota", in: p, out: &q})
}

// Key is an API key's record; its secret is never in it.
type Key = wire.Key

// Keys lists an org's keys (an admin key of the operator org or of org
// itself).
func (c *Client) Keys(ctx context.Context, org string) ([]Key, error) {
	var b struct {
		Keys []Key `json:"keys"`
	}
	return b.Keys, c.do(ctx, request{method: "GET", path: "/v1/orgs/" + esc(org) + "/keys", out: &b})
}

// MintKey makes a tenant-scoped key for org and returns its secret (shown
// this once) and record; ttl zero never expires (an admin key of the
// operator org or of org itself).
func (c *Client) MintKey(ctx context.Context, org, subject string, ttl time.Duration) (string, *Key, error) {
	return c.MintKeyScope(ctx, org, subject, "tenant", ttl)
}

// MintKeyScope is MintKey with a scope: "tenant" or "admin" (which also
// manages org's keys). An org's own admin key mints admin keys of its org
// only.
func (c *Client) MintKeyScope(ctx context.Context, org, subject, scope string, ttl time.Duration) (string, *Key, error) {
	var b wire.MintedKey
	in := map[string]any{}
	if subject != "" {
		in["subject"] = subject
	}
	if ttl > 0 {
		in["ttlSec"] = int64(ttl / time.Second)
	}
	if scope != "" {
		in["scope"] = scope
	}
	err := c.do(ctx, request{method: "POST", path: "/v1/orgs/" + esc(org) + "/keys", in: in, out: &b})
	return b.Secret, &b.Key, err
}

// RevokeKey revokes a key at once: its next call is a 401 and its open
// consoles and streams end (an admin key of the operator org or of org
// itself).
func (c *Client) RevokeKey(ctx context.Context, org, id string) error {
	return c.do(ctx, request{method: "DELETE", path: "/v1/orgs/" + esc(org) + "/keys/" + esc(id)})
}

// The typed ops (the MCP tools' HTTP door): the same operations with
// bodies that name the sandbox.

// ReadResult is a typed read: a file (Data when it is UTF-8 text, always
// DataBase64) or a directory (Entries).
type ReadResult = wire.ReadResult

// OpLease leases (id empty) or resumes and extends one of the org's
// sandboxes.
func (c *Client) OpLease(ctx context.Context, id string, req LeaseRequest) (*Sandbox, error) {
	in := struct {
		ID string `json:"id,omitempty"`
		LeaseRequest
	}{id, req}
	var sb Sandbox
	return &sb, c.do(ctx, request{method: "POST", path: "/v1/sandbox/lease", in: in, out: &sb})
}

// OpRun runs a command (typed).
func (c *Client) OpRun(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	in := struct {
		ID string `json:"id"`
		ExecRequest
	}{id, req}
	var r ExecResult
	return &r, c.do(ctx, request{method: "POST", path: "/v1/sandbox/run", in: in, out: &r})
}

// OpRead reads a file of at most 4 MiB, or lists a directory (typed).
func (c *Client) OpRead(ctx context.Context, id, path string) (*ReadResult, error) {
	var r ReadResult
	return &r, c.do(ctx, request{method: "POST", path: "/v1/sandbox/read", in: map[string]string{"id": id, "path": path}, out: &r})
}

// OpWrite writes a whole file (typed; text, or bytes as base64).
func (c *Client) OpWrite(ctx context.Context, id, path, text string) (*Written, error) {
	var w Written
	return &w, c.do(ctx, request{method: "POST", path: "/v1/sandbox/write", in: map[string]string{"id": id, "path": path, "data": text}, out: &w})
}
