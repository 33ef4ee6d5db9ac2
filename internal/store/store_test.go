package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
)

func orgCtx(org string) context.Context {
	return sandbox.WithPrincipal(context.Background(), sandbox.Principal{Org: org, Subject: "test"})
}

func newRow(class, project string) *sandbox.Sandbox {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &sandbox.Sandbox{
		ID: sandbox.NewID(), Class: class, Project: project, Status: sandbox.StatusPending, Image: class,
		Runtime: "gvisor", Workdir: "/mnt/data", Name: sandbox.NewName(), Volume: "v",
		CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

func openStore(t testing.TB) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}

func TestOneFilePerOrg(t *testing.T) {
	st, dir := openStore(t)
	a, b := newRow("exec", ""), newRow("exec", "")
	if err := st.Insert(orgCtx("Acme"), a, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(orgCtx("acme"), b, nil); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "orgs", "*", "sandbox.db"))
	if len(files) != 2 {
		t.Fatalf("want one file per org (Acme and acme slug alike), got %v", files)
	}
	// Each org sees only its own row; the other's id is not found.
	if _, err := st.Get(orgCtx("Acme"), b.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Acme read acme's row: %v", err)
	}
	got, err := st.Get(orgCtx("acme"), b.ID)
	if err != nil || got.ID != b.ID || got.Org != "acme" || !got.CreatedAt.Equal(b.CreatedAt) {
		t.Errorf("Get: %+v %v", got, err)
	}
	// Updates and deletes of another org's id touch nothing.
	for _, err := range []error{
		st.Transition(orgCtx("Acme"), b.ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusEnded}),
		st.Touch(orgCtx("Acme"), b.ID, time.Now()),
		st.Transition(orgCtx("Acme"), b.ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusError, Error: "x"}),
	} {
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("cross-org write: %v", err)
		}
	}
	if got, _ := st.Get(orgCtx("acme"), b.ID); got.Status != sandbox.StatusPending {
		t.Errorf("cross-org write landed: %+v", got)
	}
}

// TestClosedStoreOpensNothing: a call that comes after Close (a goroutine
// outliving the server) is refused and makes no org directory under a data
// directory that is being removed (the server tests found empty orgs/acme-…
// directories left behind).
func TestClosedStoreOpensNothing(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(orgCtx("acme"), newRow("exec", ""), nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "orgs")); err != nil {
		t.Fatal(err)
	}
	for _, org := range []string{"acme", "globex"} {
		if _, err := st.Get(orgCtx(org), "sb_x"); !errors.Is(err, ErrClosed) {
			t.Errorf("Get of %s after Close: %v, want ErrClosed", org, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "orgs")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a call after Close made %s again (%v)", filepath.Join(dir, "orgs"), err)
	}
}

func TestOrgRequired(t *testing.T) {
	st, _ := openStore(t)
	if _, err := st.Get(context.Background(), "sb_x"); !errors.Is(err, sandbox.ErrUnauthorized) {
		t.Errorf("Get without a principal: %v", err)
	}
	if err := st.Insert(context.Background(), newRow("exec", ""), nil); !errors.Is(err, sandbox.ErrUnauthorized) {
		t.Errorf("Insert without a principal: %v", err)
	}
}

func TestListNewestFirstAndFilters(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	var ids []string
	for i, p := range []string{"", "p1", ""} {
		r := newRow("exec", p)
		r.CreatedAt = r.CreatedAt.Add(time.Duration(i) * time.Second)
		if err := st.Insert(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	st.Transition(ctx, ids[2], sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusRunning, UID: "uid"})
	all, err := st.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].ID != ids[2] || all[2].ID != ids[0] {
		t.Errorf("not newest first: %v", all)
	}
	if l, err := st.List(ctx, Filter{Project: "p1"}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l) != 1 || l[0].ID != ids[1] {
		t.Errorf("project filter: %v", l)
	}
	if l, err := st.List(ctx, Filter{Status: sandbox.StatusRunning}); err != nil {
		t.Fatalf("listing: %v", err)
	} else if len(l) != 1 || l[0].ID != ids[2] || l[0].UID != "uid" {
		t.Errorf("status filter: %v", l)
	}
}

// TestInsertRaces checks that the project and cap rules hold under
// concurrent leases, not only for the read-only checks before them.
func TestInsertRaces(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[string]int{}
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			project := ""
			if i%2 == 0 {
				project = "shared"
			}
			err := st.Insert(ctx, newRow("exec", project), capAt(16))
			key := "ok"
			switch {
			case errors.Is(err, ErrProjectBusy):
				key = "busy"
			case errors.Is(err, errCap):
				key = "cap"
			case err != nil:
				key = err.Error()
			}
			mu.Lock()
			errs[key]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if errs["ok"] != 16 || errs["busy"]+errs["cap"] != 24 {
		t.Errorf("outcomes: %v", errs)
	}
	if u, _, _ := st.Use(ctx, ""); u.Live["exec"] != 16 {
		t.Errorf("live: %d", u.Live["exec"])
	}
	live, err := st.List(ctx, Filter{Project: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 {
		t.Errorf("project has %d live sandboxes", len(live))
	}
	// An error row frees the project.
	st.Transition(ctx, live[0].ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusError, Error: "start failed"})
	if l, _ := st.LiveInProject(ctx, "shared"); l != nil {
		t.Errorf("error row still counts as live: %v", l)
	}
}

func TestKeysAreStoredHashed(t *testing.T) {
	st, dir := openStore(t)
	ctx := context.Background()
	key, err := st.CreateKey(ctx, "acme", "ci")
	if err != nil || !strings.HasPrefix(key, "sbk_") || len(key) < 40 {
		t.Fatalf("key %q: %v", key, err)
	}
	p, err := st.Principal(ctx, key)
	if err != nil || p.Org != "acme" || p.Subject != "ci" {
		t.Errorf("Principal: %+v %v", p, err)
	}
	if _, err := st.Principal(ctx, key+"x"); !errors.Is(err, sandbox.ErrUnauthorized) {
		t.Errorf("wrong key: %v", err)
	}
	st.Close()
	// The key never reaches the disk in clear, in the database or its WAL.
	files, _ := filepath.Glob(filepath.Join(dir, "control.db*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), key[4:]) {
			t.Errorf("%s holds the key in clear", f)
		}
	}
	if _, err := st.CreateKey(ctx, "", "x"); err == nil {
		t.Error("empty org accepted")
	}
}

func TestReopenKeepsRows(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	r := newRow("exec", "")
	st.Insert(orgCtx("acme"), r, nil)
	st.Close()
	st, err = Open(context.Background(), dir) // migrations run again: a no-op
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, err := st.Get(orgCtx("acme"), r.ID); err != nil || got.ID != r.ID {
		t.Errorf("row lost across reopen: %v", err)
	}
}

// Transition is a compare-and-set on the status: a move from a status the
// row has left writes nothing and says ErrStale; a missing row is not found.
func TestTransitionCompareAndSet(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	r := newRow("exec", "")
	if err := st.Insert(ctx, r, nil); err != nil {
		t.Fatal(err)
	}
	run := &sandbox.Sandbox{Status: sandbox.StatusRunning, Name: r.Name, UID: "u1"}
	if err := st.Transition(ctx, r.ID, sandbox.StatusPending, run); err != nil {
		t.Fatal(err)
	}
	if err := st.Transition(ctx, r.ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusError, Error: "late"}); !errors.Is(err, ErrStale) {
		t.Errorf("move from a left status: %v, want ErrStale", err)
	}
	got, _ := st.Get(ctx, r.ID)
	if got.Status != sandbox.StatusRunning || got.UID != "u1" || got.Error != "" {
		t.Errorf("a stale move wrote: %+v", got)
	}
	if err := st.Transition(ctx, r.ID, sandbox.StatusSleeping, &sandbox.Sandbox{Status: sandbox.StatusEnded}); !errors.Is(err, ErrStale) {
		t.Errorf("stale end: %v", err)
	}
	if err := st.Transition(ctx, r.ID, sandbox.StatusRunning, &sandbox.Sandbox{Status: sandbox.StatusEnded}); err != nil {
		t.Fatal(err)
	}
	if err := st.Transition(ctx, r.ID, sandbox.StatusRunning, &sandbox.Sandbox{Status: sandbox.StatusEnded}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("end of a gone row: %v, want not found", err)
	}
}

var errCap = errors.New("cap")

// capAt admits while fewer than n exec sandboxes are live.
func capAt(n int) Admit {
	return func(u quota.Use, _ bool) error {
		if u.Live["exec"] >= n {
			return errCap
		}
		return nil
	}
}

// TestUseAndProjects: what the quotas count, from the rows and the projects.
func TestUseAndProjects(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	dev := newRow("dev", "app")
	exec := newRow("exec", "")
	for _, r := range []*sandbox.Sandbox{dev, exec} {
		if err := st.Insert(ctx, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	u, fresh, err := st.Use(ctx, "app")
	if err != nil || fresh || u.Live["dev"] != 1 || u.Live["exec"] != 1 || u.CPUs != 3 || u.MemoryMiB != 5120 || u.Projects != 1 || u.DiskMiB != 10240 {
		t.Fatalf("use %+v fresh %v %v", u, fresh, err)
	}
	if _, fresh, _ := st.Use(ctx, "other"); !fresh {
		t.Error("an unknown project is not new")
	}
	// A sleeping sandbox with a checkpoint holds disk, not CPU.
	st.Transition(ctx, dev.ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusSleeping, Name: dev.Name, Checkpoint: dev.ID})
	u, _, _ = st.Use(ctx, "")
	if u.CPUs != 1 || u.MemoryMiB != 1024 || u.DiskMiB != 10240+4096 || u.Live["dev"] != 1 {
		t.Errorf("with a checkpoint: %+v", u)
	}
	if _, err := st.DropProject(ctx, "app", true); !errors.Is(err, ErrProjectLive) {
		t.Errorf("dropped a held project: %v", err)
	}
	st.Transition(ctx, dev.ID, sandbox.StatusSleeping, &sandbox.Sandbox{Status: sandbox.StatusEnded})
	ps, _ := st.Projects(ctx)
	if len(ps) != 1 || ps[0].Name != "app" || ps[0].LiveSandbox != "" || ps[0].SizeMiB != 10240 {
		t.Errorf("projects %+v", ps)
	}
	if p, err := st.DropProject(ctx, "app", true); err != nil || p.Volume != dev.Volume {
		t.Errorf("drop: %+v %v", p, err)
	}
	if u, _, _ := st.Use(ctx, ""); u.Projects != 0 || u.DiskMiB != 0 {
		t.Errorf("after the drop: %+v", u)
	}
	if _, err := st.DropProject(orgCtx("globex"), "app", true); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another org's project: %v", err)
	}
}

func TestOrgQuota(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	if p, err := st.OrgQuota(ctx, "acme"); err != nil || p.Projects != nil {
		t.Fatalf("%+v %v", p, err)
	}
	two := 2
	if err := st.SetOrgQuota(ctx, "acme", quota.Policy{Projects: &two, Live: map[string]int{"dev": 1}}); err != nil {
		t.Fatal(err)
	}
	p, err := st.OrgQuota(ctx, "acme")
	if err != nil || *p.Projects != 2 || p.Live["dev"] != 1 {
		t.Errorf("%+v %v", p, err)
	}
	neg := -1
	if err := st.SetOrgQuota(ctx, "acme", quota.Policy{Projects: &neg}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("negative quota: %v", err)
	}
	if err := st.SetOrgQuota(ctx, "acme", quota.Policy{}); err != nil {
		t.Fatal(err)
	}
	if p, _ := st.OrgQuota(ctx, "acme"); p.Projects != nil {
		t.Errorf("cleared override still there: %+v", p)
	}
}

// TestKeyLifecycle: a key lists without its secret, stamps its last use,
// stops at once when revoked (no cache window) and when expired.
func TestKeyLifecycle(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	secret, k, err := st.MintKey(ctx, "acme", "ci", ScopeTenant, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Principal(ctx, secret)
	if err != nil || p.Org != "acme" || p.Key != k.ID {
		t.Fatalf("principal %+v %v (key %s)", p, err, k.ID)
	}
	ks, _ := st.Keys(ctx, "acme")
	if len(ks) != 1 || ks[0].ID != k.ID || ks[0].LastUsedAt.IsZero() || strings.Contains(fmt.Sprint(ks), secret[10:]) {
		t.Errorf("keys %+v", ks)
	}
	if others, _ := st.Keys(ctx, "globex"); len(others) != 0 {
		t.Errorf("another org's keys: %+v", others)
	}
	if err := st.RevokeKey(ctx, "globex", k.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("revoked from another org: %v", err)
	}
	if ok, _ := st.KeyActive(ctx, k.ID); !ok {
		t.Error("an active key is not active")
	}
	if err := st.RevokeKey(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Principal(ctx, secret); !errors.Is(err, sandbox.ErrUnauthorized) {
		t.Errorf("a revoked key still works: %v", err)
	}
	if ok, _ := st.KeyActive(ctx, k.ID); ok {
		t.Error("a revoked key is active")
	}
	if err := st.RevokeKey(ctx, "acme", k.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("revoked twice: %v", err)
	}
	old, ko, _ := st.MintKey(ctx, "acme", "ci", ScopeTenant, time.Now().Add(-time.Second))
	if _, err := st.Principal(ctx, old); !errors.Is(err, sandbox.ErrUnauthorized) || !strings.Contains(sandbox.Message(err), "expired") {
		t.Errorf("an expired key: %v", err)
	}
	if ok, _ := st.KeyActive(ctx, ko.ID); ok {
		t.Error("an expired key is active")
	}
}

// TestKeyScopes: a key's scope is stored, listed and makes an admin
// principal only when it is admin; CreateKey is tenant; a scope outside the
// closed set is KindInvalid naming the known ones, and nothing is stored.
func TestKeyScopes(t *testing.T) {
	st, _ := openStore(t)
	ctx := context.Background()
	tenant, err := st.CreateKey(ctx, "acme", "app")
	if err != nil {
		t.Fatal(err)
	}
	admin, ka, err := st.MintKey(ctx, "acme", "ops", ScopeAdmin, time.Time{})
	if err != nil || ka.Scope != ScopeAdmin {
		t.Fatalf("mint admin: %+v %v", ka, err)
	}
	if p, err := st.Principal(ctx, tenant); err != nil || p.Admin {
		t.Errorf("a tenant key's principal: %+v %v", p, err)
	}
	if p, err := st.Principal(ctx, admin); err != nil || !p.Admin || p.Org != "acme" {
		t.Errorf("an admin key's principal: %+v %v", p, err)
	}
	ks, _ := st.Keys(ctx, "acme")
	got := map[string]string{}
	for _, k := range ks {
		got[k.Subject] = k.Scope
	}
	if len(ks) != 2 || got["app"] != ScopeTenant || got["ops"] != ScopeAdmin {
		t.Errorf("listed scopes %+v", ks)
	}
	for _, bad := range []string{"", "Admin", "operator", "tenant "} {
		_, _, err := st.MintKey(ctx, "acme", "x", bad, time.Time{})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(sandbox.Message(err), "the scopes are tenant and admin") {
			t.Errorf("scope %q: %v", bad, err)
		}
	}
	if ks, _ := st.Keys(ctx, "acme"); len(ks) != 2 {
		t.Errorf("a refused scope stored a key: %+v", ks)
	}
}

// TestKeyScopeMigration: a control database from before scopes (its keys
// had every power of their org) opens with those keys admin, so an upgrade
// does not lock the operator out; a key minted afterwards, and a row
// written without a scope, are tenant.
func TestKeyScopeMigration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// The database as a server from before scopes left it: the migrations
	// before the scopes' one, its version, and a key in the table they made.
	names, _ := fs.Glob(migrations, "migrations/control/*.sql") // sorted, as migrate applies them
	before := -1
	for i, n := range names {
		if strings.HasSuffix(n, "_key_scopes.sql") {
			before = i
		}
	}
	if before < 0 {
		t.Fatal("no key scopes migration")
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "control.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names[:before] {
		body, _ := migrations.ReadFile(n)
		if _, err := db.ExecContext(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	secret := "sbk_before-the-upgrade"
	if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", before)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO api_keys (hash, org, subject, prefix, created_at) VALUES (?, 'system', 'operator', 'sbk_before', 1)`, hashKey(secret)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	st, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.Principal(ctx, secret); err != nil || !p.Admin || p.Org != "system" {
		t.Errorf("a key from before the upgrade: %+v %v", p, err)
	}
	if ks, _ := st.Keys(ctx, "system"); len(ks) != 1 || ks[0].Scope != ScopeAdmin {
		t.Errorf("listed %+v", ks)
	}
	fresh, err := st.CreateKey(ctx, "system", "app")
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := st.Principal(ctx, fresh); p.Admin {
		t.Error("a key minted after the upgrade is admin")
	}
	// The column's own default is the lesser scope, and the set is closed
	// in the table too.
	if _, err := st.control.ExecContext(ctx, `INSERT INTO api_keys (hash, org, subject, prefix, created_at) VALUES ('h', 'acme', 'raw', 'p', 1)`); err != nil {
		t.Fatal(err)
	}
	var scope string
	st.control.QueryRowContext(ctx, `SELECT scope FROM api_keys WHERE hash = 'h'`).Scan(&scope)
	if scope != ScopeTenant {
		t.Errorf("a row without a scope is %q", scope)
	}
	if _, err := st.control.ExecContext(ctx, `INSERT INTO api_keys (hash, org, subject, prefix, scope, created_at) VALUES ('h2', 'acme', 'raw', 'p', 'root', 1)`); err == nil {
		t.Error("the table took a scope outside the set")
	}
}

// TestEventsBoundPerOrg: an org's session logs, over any number of
// sessions, stay under MaxOrgEventBytes (its oldest events go first), the
// kept count matches the table, and another org's logs are untouched.
func TestEventsBoundPerOrg(t *testing.T) {
	defer func(old int64) { MaxOrgEventBytes = old }(MaxOrgEventBytes)
	MaxOrgEventBytes = 1 << 20
	st, _ := openStore(t)
	hostile, quiet := orgCtx("hostile"), orgCtx("quiet")
	seq := int64(0)
	ev := func(session string, n int) []Event {
		var out []Event
		for range n {
			seq++
			out = append(out, Event{Session: session, Seq: seq, Kind: "stdout", Data: make([]byte, 4096), At: time.Now()})
		}
		return out
	}
	if err := st.AppendEvents(quiet, ev("s", 10)); err != nil {
		t.Fatal(err)
	}
	// 2,000 sessions of 4 KiB events: 8 MiB against a bound of 1 MiB.
	for i := range 200 {
		var batch []Event
		for j := range 10 {
			batch = append(batch, ev(fmt.Sprintf("s%d-%d", i, j), 1)...)
		}
		if err := st.AppendEvents(hostile, batch); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.EventBytes(hostile)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	db, _, _ := st.orgDB(hostile)
	db.QueryRow(`SELECT COALESCE(SUM(` + eventSize + `), 0) FROM session_events WHERE org = 'hostile'`).Scan(&sum)
	if n > MaxOrgEventBytes || n != sum || n < MaxOrgEventBytes/2 {
		t.Errorf("the org holds %d bytes of events (the table sums to %d), bound %d", n, sum, MaxOrgEventBytes)
	}
	if got, _ := st.Events(hostile, "s0-0", 0, 10); len(got) != 0 {
		t.Errorf("the oldest session still holds %d events", len(got))
	}
	if got, _ := st.Events(hostile, "s199-9", 0, 10); len(got) != 1 {
		t.Errorf("the newest session holds %d events", len(got))
	}
	if got, _ := st.Events(quiet, "s", 0, 100); len(got) != 10 {
		t.Errorf("the other org's log holds %d of its 10 events", len(got))
	}
}

// TestMetadataFilter: metadata is stored, read back, replaced, and a list
// keeps the sandboxes whose metadata has every key asked with its value.
func TestMetadataFilter(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	a, b := newRow("exec", ""), newRow("exec", "")
	a.Metadata = map[string]string{"team": "x", "run": "1"}
	b.Metadata = map[string]string{"team": "y"}
	for _, sb := range []*sandbox.Sandbox{a, b} {
		if err := st.Insert(ctx, sb, nil); err != nil {
			t.Fatal(err)
		}
	}
	list := func(m map[string]string) []string {
		l, err := st.List(ctx, Filter{Metadata: m})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range l {
			ids = append(ids, sb.ID)
		}
		return ids
	}
	if got := list(map[string]string{"team": "x"}); len(got) != 1 || got[0] != a.ID {
		t.Errorf("team=x: %v", got)
	}
	if got := list(map[string]string{"team": "x", "run": "2"}); len(got) != 0 {
		t.Errorf("team=x run=2: %v", got)
	}
	if err := st.SetMetadata(ctx, b.ID, map[string]string{"team": "x"}); err != nil {
		t.Fatal(err)
	}
	if got := list(map[string]string{"team": "x"}); len(got) != 2 {
		t.Errorf("after the change: %v", got)
	}
	if sb, _ := st.Get(ctx, a.ID); sb.Metadata["run"] != "1" {
		t.Errorf("read back: %+v", sb.Metadata)
	}
	if err := st.SetMetadata(orgCtx("globex"), a.ID, nil); err == nil {
		t.Error("another org changed acme's metadata")
	}
}

// A sandbox with public ports is found by id alone, in one lookup; its end
// drops it from the index; a sandbox without public ports is not in it.
func TestPublicOrg(t *testing.T) {
	st, _ := openStore(t)
	ctx := orgCtx("acme")
	pub := newRow("exec", "")
	pub.PublicPorts = []int{8000}
	plain := newRow("exec", "")
	for _, sb := range []*sandbox.Sandbox{pub, plain} {
		if err := st.Insert(ctx, sb, nil); err != nil {
			t.Fatal(err)
		}
	}
	if org, err := st.PublicOrg(context.Background(), pub.ID); err != nil || org != "acme" {
		t.Fatalf("PublicOrg(public) = %q, %v", org, err)
	}
	if org, err := st.PublicOrg(context.Background(), plain.ID); err != nil || org != "" {
		t.Fatalf("PublicOrg(no public ports) = %q, %v", org, err)
	}
	if err := st.Transition(ctx, pub.ID, sandbox.StatusPending, &sandbox.Sandbox{Status: sandbox.StatusEnded}); err != nil {
		t.Fatal(err)
	}
	if org, err := st.PublicOrg(context.Background(), pub.ID); err != nil || org != "" {
		t.Fatalf("PublicOrg after the end = %q, %v", org, err)
	}
}
