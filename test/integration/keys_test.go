package integration_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/store"
)

// TestKeyScopes: the operator routes (quotas, every org's keys, /metrics)
// answer only the operator org's admin keys; an org's own admin key
// manages its own keys, never another org's and never a quota; tenant keys
// manage nothing, the operator org's included, and are told an admin key is
// what they lack; a minted key is tenant unless asked, an admin one only
// for the minter's own org, and a scope outside the set is a 400.
func TestKeyScopes(t *testing.T) {
	onBackends(t, server.Config{}, func(t *testing.T, e *env) { keyScopes(t, e) })
}

func keyScopes(t *testing.T, e *env) {
	ctx := context.Background()
	mint := func(org, subject, scope string) (string, store.Key) {
		t.Helper()
		secret, k, err := e.srv.Store.MintKey(ctx, org, subject, scope, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return secret, k
	}
	// e.do sends e.keys[name] as the bearer.
	var globexKey store.Key
	e.keys["system-tenant"], _ = mint("system", "app", store.ScopeTenant)
	e.keys["acme-admin"], _ = mint("acme", "ops", store.ScopeAdmin)
	e.keys["globex-spare"], globexKey = mint("globex", "spare", store.ScopeTenant)

	const (
		needAdmin = "admin-scoped"
		operator  = "for the operator org"
		ownOrg    = "the operator org or the org's own admin key"
	)
	for _, tc := range []struct {
		who, method, path string
		body              any
		status            int
		says              string
	}{
		// The operator: an admin key of the operator org.
		{"system", "GET", "/v1/orgs/acme/quota", nil, 200, ""},
		{"system", "GET", "/v1/orgs/globex/keys", nil, 200, ""},
		{"system", "GET", "/metrics", nil, 200, ""},
		// The operator org's tenant key is a tenant like any other.
		{"system-tenant", "GET", "/v1/orgs/acme/quota", nil, 403, needAdmin},
		{"system-tenant", "PUT", "/v1/orgs/acme/quota", map[string]any{}, 403, needAdmin},
		{"system-tenant", "GET", "/v1/orgs/acme/keys", nil, 403, needAdmin},
		{"system-tenant", "POST", "/v1/orgs/system/keys", map[string]any{"scope": "admin"}, 403, needAdmin},
		{"system-tenant", "GET", "/metrics", nil, 403, needAdmin},
		// An org's own admin key: its keys, nothing else of the operator's.
		{"acme-admin", "GET", "/v1/orgs/acme/keys", nil, 200, ""},
		{"acme-admin", "GET", "/v1/orgs/globex/keys", nil, 403, ownOrg},
		{"acme-admin", "POST", "/v1/orgs/globex/keys", map[string]any{}, 403, ownOrg},
		{"acme-admin", "POST", "/v1/orgs/system/keys", map[string]any{"scope": "admin"}, 403, ownOrg},
		{"acme-admin", "DELETE", "/v1/orgs/globex/keys/" + globexKey.ID, nil, 403, ownOrg},
		{"acme-admin", "GET", "/v1/orgs/acme/quota", nil, 403, operator},
		{"acme-admin", "PUT", "/v1/orgs/acme/quota", map[string]any{"projects": 99}, 403, operator},
		{"acme-admin", "GET", "/metrics", nil, 403, operator},
		{"acme-admin", "POST", "/v1/orgs/acme/keys", map[string]any{"scope": "root"}, 400, "the scopes are tenant and admin"},
		{"acme-admin", "POST", "/v1/orgs/acme/keys", map[string]any{"scope": "Admin"}, 400, "the scopes are tenant and admin"},
		// A tenant key manages nothing, not even its own org's keys.
		{"acme", "GET", "/v1/orgs/acme/keys", nil, 403, needAdmin},
		{"acme", "POST", "/v1/orgs/acme/keys", map[string]any{"scope": "admin"}, 403, needAdmin},
		{"acme", "GET", "/v1/orgs/globex/keys", nil, 403, ownOrg},
		{"acme", "GET", "/v1/orgs/acme/quota", nil, 403, operator},
		{"acme", "GET", "/metrics", nil, 403, operator},
		// Admin keys still work the org's sandboxes like a tenant's.
		{"acme-admin", "GET", "/v1/sandbox", nil, 200, ""},
	} {
		r := e.do(tc.method, tc.path, tc.who, tc.body)
		var b struct{ Error string }
		json.Unmarshal(r.Body, &b)
		if r.Status != tc.status || !strings.Contains(b.Error, tc.says) {
			t.Errorf("%s %s as %s: %d %s, want %d saying %q", tc.method, tc.path, tc.who, r.Status, r.Body, tc.status, tc.says)
		}
	}
	if e.do("GET", "/v1/sandbox", "globex-spare", nil).Status != 200 {
		t.Error("a refused revoke of another org's key revoked it")
	}

	// Self-service: acme's admin mints for acme, tenant unless asked.
	type minted struct {
		Secret string
		store.Key
	}
	var tenant, admin minted
	into(t, e.must(201, "POST", "/v1/orgs/acme/keys", "acme-admin", map[string]any{"subject": "ci"}), &tenant)
	into(t, e.must(201, "POST", "/v1/orgs/acme/keys", "acme-admin", map[string]any{"scope": "admin"}), &admin)
	if tenant.Scope != store.ScopeTenant || tenant.Org != "acme" || admin.Scope != store.ScopeAdmin || admin.Org != "acme" || admin.Subject != "org admin" {
		t.Errorf("minted %+v and %+v", tenant.Key, admin.Key)
	}
	e.keys["acme-ci"], e.keys["acme-admin2"] = tenant.Secret, admin.Secret
	e.must(403, "GET", "/v1/orgs/acme/keys", "acme-ci", nil)
	e.must(200, "GET", "/v1/orgs/acme/keys", "acme-admin2", nil)
	e.must(403, "GET", "/v1/orgs/acme/quota", "acme-admin2", nil)
	var list struct{ Keys []store.Key }
	into(t, e.must(200, "GET", "/v1/orgs/acme/keys", "acme-admin", nil), &list)
	scopes := map[string]string{}
	for _, k := range list.Keys {
		scopes[k.ID] = k.Scope
	}
	if len(list.Keys) != 4 || scopes[tenant.ID] != "tenant" || scopes[admin.ID] != "admin" {
		t.Errorf("acme's keys %+v", list.Keys)
	}
	e.must(200, "DELETE", "/v1/orgs/acme/keys/"+admin.ID, "acme-admin", nil)
	e.must(401, "GET", "/v1/sandbox", "acme-admin2", nil)

	// The operator mints for any org, either scope.
	var op minted
	into(t, e.must(201, "POST", "/v1/orgs/globex/keys", "system", map[string]any{"scope": "admin"}), &op)
	if op.Scope != store.ScopeAdmin || op.Org != "globex" || op.Subject != "operator" {
		t.Errorf("the operator minted %+v", op.Key)
	}
	e.keys["globex-admin"] = op.Secret
	e.must(200, "GET", "/v1/orgs/globex/keys", "globex-admin", nil)
	e.must(403, "GET", "/v1/orgs/acme/keys", "globex-admin", nil)
}

// into decodes an answer's JSON body into v.
func into(t *testing.T, r resp, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%v: %q", err, r.Body)
	}
}
