package integration_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sandboxd/sandbox/internal/credential"
	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/server"
)

// leaseClaims are the lease credential's claims, as a client reads them.
type leaseClaims struct {
	jwt.Claims
	Org     string            `json:"org"`
	Sandbox string            `json:"sandbox_id"`
	Scope   string            `json:"scope"`
	Act     map[string]string `json:"act"`
}

// credentialIn reads the sandbox's credential file over exec ("" when
// there is none).
func (e *env) credentialIn(org, id string) string {
	e.t.Helper()
	a := e.exec(org, id, map[string]any{"argv": []string{"sh", "-c", "cat " + credential.Path + " 2>/dev/null || true"}})
	return strings.TrimSpace(a.Stdout)
}

// verifyPublished checks tok against the JWKS the server publishes, found
// through its discovery document, with go-jose (a standard JOSE library,
// not the server's code), and returns its claims.
func (e *env) verifyPublished(tok string) leaseClaims {
	e.t.Helper()
	var meta struct {
		Issuer string `json:"issuer"`
		JWKS   string `json:"jwks_uri"`
		Token  string `json:"token_endpoint"`
	}
	getJSON(e.t, e.http.URL+identity.PathDiscovery, &meta)
	if meta.Issuer != e.http.URL || meta.JWKS == "" || meta.Token != e.http.URL+identity.PathToken {
		e.t.Fatalf("discovery: %+v", meta)
	}
	var set jose.JSONWebKeySet
	getJSON(e.t, meta.JWKS, &set)
	for _, k := range set.Keys {
		if !k.IsPublic() {
			e.t.Fatalf("the JWKS publishes a private key: %s", k.KeyID)
		}
	}
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		e.t.Fatalf("the credential is not a signed JWT: %v", err)
	}
	keys := set.Key(parsed.Headers[0].KeyID)
	if len(keys) != 1 {
		e.t.Fatalf("the credential's kid %q is not in the JWKS", parsed.Headers[0].KeyID)
	}
	var c leaseClaims
	if err := parsed.Claims(keys[0].Key, &c); err != nil {
		e.t.Fatalf("the credential does not verify against the published key: %v", err)
	}
	if err := c.Claims.ValidateWithLeeway(jwt.Expected{Issuer: e.http.URL, AnyAudience: jwt.Audience{"sandbox"}, Time: time.Now()}, 0); err != nil {
		e.t.Fatalf("the credential's claims: %v", err)
	}
	return c
}

func getJSON(t testing.TB, u string, v any) {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, res.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, b)
	}
}

// exchange posts an RFC 8693 request to the server's token endpoint.
func (e *env) exchange(form url.Values, basic ...string) (int, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.http.URL+identity.PathToken, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if len(basic) == 2 {
		req.SetBasicAuth(basic[0], basic[1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("token endpoint: %v: %s", err, b)
	}
	return res.StatusCode, out
}

// TestLeaseCredentialOnRunsc: a lease is handed its own credential over
// exec, a JWT of the server's issuer that verifies against the published
// JWKS, names the org and the sandbox, expires with the lease, follows a
// renew, can read its own lease and nothing else, narrows by exchange and
// never widens, and is gone with the lease; none of it, and none of the
// caller's key, is in a spec, an environment, a file of the data
// directory or an answer.
func TestLeaseCredentialOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	other := e.lease("acme", map[string]any{"ttlSec": 600})
	foreign := e.lease("globex", map[string]any{"ttlSec": 600})

	tok := e.credentialIn("acme", id)
	if tok == "" {
		t.Fatal("the sandbox has no credential at " + credential.Path)
	}
	perm := e.exec("acme", id, map[string]any{"argv": []string{"sh", "-c", "stat -c '%a %u' /run/sandbox /run/sandbox/token; id -u"}})
	lines := strings.Fields(perm.Stdout)
	if len(lines) != 5 || lines[0] != "700" || lines[2] != "600" || lines[1] != lines[4] || lines[3] != lines[4] {
		t.Errorf("the credential is not the sandbox user's alone (dir mode, uid; file mode, uid; id -u): %q", perm.Stdout)
	}
	sb := e.must(200, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)
	c := e.verifyPublished(tok)
	if c.Org != "acme" || c.Sandbox != id || c.Act["sub"] != "sandbox:"+id || c.Scope != "lease:read lease:renew narrate" {
		t.Errorf("claims: %+v", c)
	}
	if exp := c.Expiry.Time().Unix(); float64(exp) != sb["expiresAt"].(float64) {
		t.Errorf("exp %d, the lease ends at %v", exp, sb["expiresAt"])
	}
	if tok == e.credentialIn("acme", other) {
		t.Error("two sandboxes share a credential")
	}

	// No answer but the token endpoint's carries it: not the lease, not a
	// listing, not a stat.
	sig := signature(tok)
	for _, path := range []string{"/v1/sandbox/" + id, "/v1/sandbox", "/v1/sandbox/" + id + "/stats"} {
		if r := e.must(200, "GET", path, "acme", nil); strings.Contains(string(r.Body), sig) {
			t.Errorf("GET %s answers the credential", path)
		}
	}

	// What it can do: its own lease, and nothing else.
	e.must(200, "GET", "/v1/sandbox/"+id, tok, nil)
	e.must(200, "GET", "/v1/sandboxes/"+id, tok, nil)
	e.must(404, "GET", "/v1/sandbox/"+other, tok, nil)
	e.must(404, "GET", "/v1/sandbox/"+foreign, tok, nil)
	e.must(403, "GET", "/v1/sandbox", tok, nil)
	e.must(403, "POST", "/v1/sandbox", tok, map[string]any{})
	e.must(403, "POST", "/v1/sandbox/"+id+"/exec", tok, map[string]any{"argv": []string{"true"}})
	e.must(403, "DELETE", "/v1/sandbox/"+id, tok, nil)
	e.must(403, "GET", "/v1/orgs/acme/keys", tok, nil)
	e.must(202, "POST", "/v1/sessions/build/events", tok, map[string]any{"text": "step 1 done"})
	// The MCP door and the previews refuse it too.
	// (Raw: the MCP SDK answers its 401 in plain text.)
	mreq, _ := http.NewRequest("POST", e.http.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	mreq.Header.Set("Authorization", "Bearer "+tok)
	mreq.Header.Set("Content-Type", "application/json")
	mreq.Header.Set("Accept", "application/json, text/event-stream")
	if res, err := http.DefaultClient.Do(mreq); err != nil || res.StatusCode != 401 {
		t.Errorf("MCP with a sandbox's credential: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	if r := e.do("GET", "/v1/sandbox/"+id+"/ports/8000/", tok, nil); r.Status != 403 {
		t.Errorf("a preview with a sandbox's credential: %d %s", r.Status, r.Body)
	}

	// A renew hands a new credential, to the new end.
	time.Sleep(1100 * time.Millisecond) // a new second: a new exp
	renewed := e.must(200, "POST", "/v1/sandbox/"+id+"/renew", tok, map[string]any{"ttlSec": 1200}).JSON(t)
	tok2 := e.credentialIn("acme", id)
	c2 := e.verifyPublished(tok2)
	if tok2 == tok || float64(c2.Expiry.Time().Unix()) != renewed["expiresAt"].(float64) || renewed["expiresAt"].(float64) <= sb["expiresAt"].(float64) {
		t.Errorf("after a renew to %v: exp %d (before %d), same token %v", renewed["expiresAt"], c2.Expiry.Time().Unix(), c.Expiry.Time().Unix(), tok2 == tok)
	}

	// A delegated exchange narrows and never widens; no refresh token.
	form := url.Values{"grant_type": {identity.GrantTokenExchange}, "client_id": {"sandbox"}, "subject_token": {tok2},
		"subject_token_type": {identity.TokenTypeJWT}, "resource": {identity.Resource(id)}, "scope": {"lease:read"}}
	st, ans := e.exchange(form)
	if st != 200 || ans["refresh_token"] != nil || ans["token_type"] != "Bearer" || ans["scope"] != "lease:read" {
		t.Fatalf("narrowing exchange: %d %v", st, ans)
	}
	narrow := ans["access_token"].(string)
	nc := e.verifyPublished(narrow)
	if nc.Expiry.Time().After(c2.Expiry.Time()) {
		t.Errorf("the narrowed token outlives its subject: %v > %v", nc.Expiry.Time(), c2.Expiry.Time())
	}
	e.must(200, "GET", "/v1/sandbox/"+id, narrow, nil)
	e.must(403, "POST", "/v1/sandbox/"+id+"/renew", narrow, map[string]any{"ttlSec": 1200})
	e.must(403, "POST", "/v1/sessions/build/events", narrow, map[string]any{"text": "x"})
	for name, f := range map[string]url.Values{
		"a wider scope":            with(with(form, "subject_token", narrow), "scope", "lease:read lease:renew"),
		"another sandbox":          with(with(form, "subject_token", narrow), "resource", identity.Resource(other)),
		"a scope that is not one":  with(form, "scope", "admin"),
		"a refresh token":          with(form, "requested_token_type", "urn:ietf:params:oauth:token-type:refresh_token"),
		"an actor token":           with(form, "actor_token", tok2),
		"another grant":            with(form, "grant_type", "client_credentials"),
		"another client":           with(form, "client_id", "web"),
		"a forged subject":         with(form, "subject_token", tok2[:len(tok2)-4]+"AAAA"),
		"an API key, no secret":    with(with(form, "subject_token", e.keys["acme"]), "subject_token_type", identity.TokenTypeAccess),
		"the operator, no secret":  with(with(form, "subject_token", e.keys["system"]), "subject_token_type", identity.TokenTypeAccess),
		"a foreign sandbox by key": with(with(with(form, "subject_token", e.keys["acme"]), "subject_token_type", identity.TokenTypeAccess), "resource", identity.Resource(foreign)),
	} {
		if st, ans := e.exchange(f); st == 200 || ans["access_token"] != nil {
			t.Errorf("%s: exchanged: %d %v", name, st, ans)
		}
	}
	// With the client's secret: still never for the operator org.
	secret := strings.TrimSpace(readFile(t, filepath.Join(e.data, "identity", "sandbox-client.secret")))
	opForm := with(with(form, "subject_token", e.keys["system"]), "subject_token_type", identity.TokenTypeAccess)
	opForm.Del("scope")
	opForm.Del("client_id")
	if st, ans := e.exchange(opForm, "sandbox", secret); st != 400 || ans["error"] != "invalid_grant" {
		t.Errorf("the operator's key exchanged by the sandbox client: %d %v", st, ans)
	}
	if st, ans := e.exchange(opForm, "sandbox", "wrong-secret-wrong-secret"); st != 401 || ans["error"] != "invalid_client" {
		t.Errorf("a wrong client secret: %d %v", st, ans)
	}
	// An operator's lease starts unprivileged: no credential at all.
	opID := e.lease("system", map[string]any{"ttlSec": 300})
	if got := e.credentialIn("system", opID); got != "" {
		t.Errorf("an operator's lease was handed a credential: %.40s…", got)
	}

	if l := e.logs.String(); !strings.Contains(l, "sandbox leased") || !strings.Contains(l, "reason=\"the reserved operator org") {
		t.Errorf("the server's log (grepped below) does not say what happened: %.2000s", l)
	}

	// None of it anywhere but the sandbox and the answers that carry it.
	for _, secret := range []string{tok, tok2, narrow, e.keys["acme"]} {
		e.noSecretIn(secret)
	}
	env := e.exec("acme", id, map[string]any{"argv": []string{"sh", "-c", "cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'"}})
	if strings.Contains(env.Stdout, tok2[:40]) || strings.Contains(env.Stdout, "eyJ") || strings.Contains(env.Stdout, e.keys["acme"]) {
		t.Errorf("a credential is in the sandbox's environment: %s", env.Stdout)
	}

	// Revoked with the lease.
	e.must(200, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	for _, tk := range []string{tok2, narrow} {
		if r := e.do("GET", "/v1/sandbox/"+id, tk, nil); r.Status != 401 {
			t.Errorf("a credential of an ended lease: %d %s", r.Status, r.Body)
		}
	}
}

// signature is a JWT's signature: what no other token shares, so what a
// grep for the token looks for.
func signature(jwt string) string { return jwt[strings.LastIndexByte(jwt, '.')+1:] }

func with(v url.Values, k, val string) url.Values {
	out := url.Values{}
	for kk, vv := range v {
		out[kk] = append([]string(nil), vv...)
	}
	out.Set(k, val)
	return out
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noSecretIn fails if secret is in any file of the data directory (runsc
// specs and logs, bundles, stores) or of runsc's own state.
func (e *env) noSecretIn(secret string) {
	e.t.Helper()
	if len(secret) < 20 {
		e.t.Fatalf("not a secret: %q", secret)
	}
	probe := secret
	if identity.IsJWT(secret) {
		probe = signature(secret)
	}
	if strings.Contains(e.logs.String(), probe) {
		e.t.Errorf("a secret (%.12s…) is in the server's log", secret)
	}
	for _, root := range []string{e.data, "/run/runsc", "/var/run/runsc"} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Size() > 64<<20 {
				return nil
			}
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), probe) {
				e.t.Errorf("a secret (%.12s…) is in %s", secret, p)
			}
			return nil
		})
	}
}

// TestLeaseCredentialHostileSandbox: the directory is the sandbox user's,
// and the writer runs as the sandbox's root: a link the user plants where
// the token goes is replaced, never followed, so root's files stay root's.
func TestLeaseCredentialHostileSandbox(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	e.sh("acme", id, "cp /etc/passwd /tmp/before; rm -f /run/sandbox/token; ln -s /etc/passwd /run/sandbox/token")
	e.must(200, "POST", "/v1/sandbox/"+id+"/renew", "acme", map[string]any{"ttlSec": 900})
	out := e.sh("acme", id, "stat -c %u /etc/passwd /run/sandbox/token; test -L /run/sandbox/token || echo not-a-link; cmp /etc/passwd /tmp/before && echo same")
	if out != "0\n1000\nnot-a-link\nsame\n" {
		t.Errorf("after a planted link (passwd's owner and kind; the token's; passwd unchanged): %q", out)
	}
	if tok := e.credentialIn("acme", id); e.verifyPublished(tok).Sandbox != id {
		t.Error("the credential was not written again")
	}
}

// TestLeaseCredentialRefreshedOnRunsc: a credential shorter than its
// lease (--lease-credential-ttl) is exchanged again before it expires,
// for as long as the lease lives.
func TestLeaseCredentialRefreshedOnRunsc(t *testing.T) {
	e := newEnvConfig(t, server.Config{Identity: identity.Config{CredentialTTL: 3 * time.Second}})
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	first := e.verifyPublished(e.credentialIn("acme", id))
	if life := time.Until(first.Expiry.Time()); life > 3*time.Second {
		t.Fatalf("the credential lives %v, past its TTL", life)
	}
	seen := map[int64]bool{first.Expiry.Time().Unix(): true}
	deadline := time.Now().Add(12 * time.Second)
	for len(seen) < 3 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		c := e.verifyPublished(e.credentialIn("acme", id)) // valid now: refreshed before it expired
		seen[c.Expiry.Time().Unix()] = true
	}
	if len(seen) < 3 {
		t.Errorf("in 12 s a 3 s credential was refreshed %d times", len(seen)-1)
	}
	e.must(200, "DELETE", "/v1/sandbox/"+id, "acme", nil)
}

// TestLeaseCredentialSurvivesRestartOnRunsc: the issuer's keys are the
// data directory's, so a credential handed before a restart still works
// after it, and the next renew hands a new one.
func TestLeaseCredentialSurvivesRestartOnRunsc(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 600})
	tok := e.credentialIn("acme", id)
	before := e.verifyPublished(tok)
	e.restart(t)
	e.must(200, "GET", "/v1/sandbox/"+id, tok, nil)
	e.verifyPublished(tok) // the same key is still published
	e.must(200, "POST", "/v1/sandbox/"+id+"/renew", tok, map[string]any{"ttlSec": 900})
	after := e.verifyPublished(e.credentialIn("acme", id))
	if !after.Expiry.Time().After(before.Expiry.Time()) || after.Sandbox != id {
		t.Errorf("after a restart and a renew: %+v (before %+v)", after, before)
	}
}

// TestLeaseCredentialForkOnRunsc: a fork comes from its parent's memory,
// credential file and all; before any command of the caller's runs in
// it, that copy is replaced by the fork's own credential, which reads the
// fork's lease and not the parent's, while the parent keeps its own.
func TestLeaseCredentialForkOnRunsc(t *testing.T) {
	e := newEnv(t)
	parent := e.lease("acme", map[string]any{"ttlSec": 600})
	parentTok := e.credentialIn("acme", parent)
	if e.verifyPublished(parentTok).Sandbox != parent {
		t.Fatal("the parent's credential is not its own")
	}
	fork, _ := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+parent+"/fork", "acme", map[string]any{"ttlSec": 300}).JSON(t)["id"].(string)
	forkTok := e.credentialIn("acme", fork) // the first command into the fork
	if forkTok == "" {
		t.Fatal("the fork has no credential")
	}
	if forkTok == parentTok {
		t.Fatal("the fork holds its parent's credential")
	}
	c := e.verifyPublished(forkTok)
	sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+fork, "acme", nil).JSON(t)
	if c.Sandbox != fork || c.Org != "acme" || c.Act["sub"] != "sandbox:"+fork || float64(c.Expiry.Time().Unix()) != sb["expiresAt"].(float64) {
		t.Errorf("the fork's credential: %+v (its lease ends at %v)", c, sb["expiresAt"])
	}
	e.must(http.StatusOK, "GET", "/v1/sandbox/"+fork, forkTok, nil)
	e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+parent, forkTok, nil)
	e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+parent+"/renew", forkTok, map[string]any{"ttlSec": 60})
	if got := e.credentialIn("acme", parent); got != parentTok {
		t.Errorf("the parent's credential changed with the fork")
	}
}

// TestLeaseCredentialAfterWakeOnRunsc: a wake puts the sandbox's live
// credential in place: after a cold wake (the checkpoint lost, the
// container started without the memory the file lived in), and after a
// wake from memory when the credential was refreshed while the sandbox
// slept (the memory holds the one from before the sleep).
func TestLeaseCredentialAfterWakeOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	t.Run("cold", func(t *testing.T) {
		// The credential lives as long as the lease: no refresh writes it.
		e := newEnv(t)
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		tok := e.credentialIn("acme", id)
		e.verifyPublished(tok)
		if r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil).JSON(t); r["memoryKept"] != true {
			t.Fatalf("pause: %v", r)
		}
		// The checkpoint goes: the wake starts the sandbox fresh.
		cps, err := filepath.Glob(filepath.Join(e.data, "runtime", "checkpoints", "*"))
		if err != nil || len(cps) != 1 {
			t.Fatalf("checkpoints: %v %v", cps, err)
		}
		if err := os.RemoveAll(cps[0]); err != nil {
			t.Fatal(err)
		}
		if r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/resume", "acme", nil).JSON(t); r["woken"] != true || r["memoryKept"] == true {
			t.Fatalf("resume after the checkpoint went: %v", r)
		}
		if got := e.credentialIn("acme", id); got == "" {
			t.Fatal("no credential after a cold wake")
		} else if c := e.verifyPublished(got); c.Sandbox != id {
			t.Errorf("after a cold wake: %+v", c)
		}
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	})

	t.Run("refreshed while asleep", func(t *testing.T) {
		const ttl = 45 * time.Second // a wake under load takes seconds: the refreshes are far apart
		e := newEnvConfig(t, server.Config{Identity: identity.Config{CredentialTTL: ttl}})
		id := e.lease("acme", map[string]any{"ttlSec": 600})
		// The credential is exchanged again two thirds into its life
		// (credential.go), asleep or not: the check below counts only when
		// the wake's read comes before the next of those, which would
		// write a fresh one anyway.
		for attempt := 1; ; attempt++ {
			tok := e.credentialIn("acme", id)
			c := e.verifyPublished(tok)
			minted := c.Expiry.Time().Add(-ttl)
			e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
			// Past the refresh while asleep (two thirds of its life).
			time.Sleep(time.Until(minted.Add(2*ttl/3)) + 3*time.Second)
			if r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/resume", "acme", nil).JSON(t); r["memoryKept"] != true {
				t.Fatalf("resume: %v", r)
			}
			got := e.credentialIn("acme", id)
			// The refreshes come at minted+2/3·ttl, then every 2/3·ttl.
			next := minted.Add(2 * ttl / 3)
			for !next.After(c.Expiry.Time()) {
				next = next.Add(2 * ttl / 3)
			}
			if time.Now().After(next.Add(-2 * time.Second)) {
				if attempt == 3 {
					t.Fatalf("three wakes were each too slow to tell the wake's write from a refresh's")
				}
				t.Logf("the wake took until the next refresh: again")
				continue
			}
			if got == tok {
				t.Fatal("after the wake the sandbox holds the credential from before its sleep, not the one refreshed while it slept")
			}
			if c := e.verifyPublished(got); c.Sandbox != id {
				t.Errorf("after the wake: %+v", c)
			}
			break
		}
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	})
}

// TestTokenEndpointPerSandboxOnRunsc: the token endpoint's bound is per
// sandbox as well as global. One sandbox flooding narrowing exchanges of
// its own credential, many at once, is refused (429) at its own bucket,
// while another sandbox's exchanges, made during the flood, all succeed.
func TestTokenEndpointPerSandboxOnRunsc(t *testing.T) {
	e := newEnv(t)
	a := e.lease("acme", map[string]any{"ttlSec": 600})
	b := e.lease("acme", map[string]any{"ttlSec": 600})
	form := func(id string) url.Values {
		return url.Values{"grant_type": {identity.GrantTokenExchange}, "client_id": {"sandbox"},
			"subject_token": {e.credentialIn("acme", id)}, "subject_token_type": {identity.TokenTypeJWT},
			"resource": {identity.Resource(id)}, "scope": {"lease:read"}}
	}
	fa, fb := form(a).Encode(), form(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	post := func(body string) (int, string) {
		res, err := client.Post(e.http.URL+identity.PathToken, "application/x-www-form-urlencoded", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	var refused, served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 96 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch st, _ := post(fa); st {
				case 429:
					refused.Add(1)
				case 200:
					served.Add(1)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for refused.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if refused.Load() < 100 {
		t.Fatalf("a flood of sandbox A's exchanges was not refused (%d served, %d refused)", served.Load(), refused.Load())
	}
	// During the flood, sandbox B's exchanges (as many as its own
	// bucket holds) all succeed.
	for i := range 10 {
		if st, body := post(fb.Encode()); st != 200 {
			t.Fatalf("sandbox B's exchange %d during A's flood: %d %s (A: %d served, %d refused)", i, st, body, served.Load(), refused.Load())
		}
	}
	// A's own bucket is what refused it: it was served its burst and
	// little more.
	if n := served.Load(); n > 100 {
		t.Errorf("sandbox A was served %d exchanges in its flood", n)
	}
}
