package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/wire"
)

// Store is the set of per-org databases under one data directory, plus the
// control database.
type Store struct {
	dir     string
	control *sql.DB

	mu     sync.Mutex
	orgs   map[string]*orgDB // by raw org name
	closed bool              // Close ran: no org is opened (or its directory made) again
}

// ErrClosed is what a call on a closed store returns: work that outlives
// the server (a late goroutine) is refused instead of re-creating an org's
// directory, and its database, under a data directory being torn down.
var ErrClosed = errors.New("store: closed")

// orgDB is one org's database with its hot statement prepared once.
type orgDB struct {
	*sql.DB
	get *sql.Stmt
}

// Open opens (creating if needed) the store under dataDir.
func Open(ctx context.Context, dataDir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dataDir, "orgs"), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	control, err := open(ctx, filepath.Join(dataDir, "control.db"), "control")
	if err != nil {
		return nil, err
	}
	return &Store{dir: dataDir, control: control, orgs: map[string]*orgDB{}}, nil
}

// Close closes every database and reports every failure.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	errs := []error{s.control.Close()}
	for _, db := range s.orgs {
		errs = append(errs, db.get.Close(), db.Close())
	}
	s.orgs = map[string]*orgDB{}
	return errors.Join(errs...)
}

// OrgDir is the directory of org's files under the data directory.
func (s *Store) OrgDir(org string) string {
	return filepath.Join(s.dir, "orgs", sandbox.Slug(org))
}

// orgDB returns the org's database, opening it on first use.
func (s *Store) orgDB(ctx context.Context) (*orgDB, string, error) {
	org, err := sandbox.OrgRequired(ctx)
	if err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, "", ErrClosed
	}
	if db := s.orgs[org]; db != nil {
		return db, org, nil
	}
	dir := s.OrgDir(org)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("store: %w", err)
	}
	if _, err := s.control.ExecContext(ctx, `INSERT OR IGNORE INTO orgs (name, slug, created_at) VALUES (?, ?, ?)`,
		org, sandbox.Slug(org), millis(time.Now())); err != nil {
		return nil, "", fmt.Errorf("store: %w", err)
	}
	raw, err := open(ctx, filepath.Join(dir, "sandbox.db"), "org")
	if err != nil {
		return nil, "", err
	}
	get, err := raw.PrepareContext(ctx, `SELECT `+columns+` FROM sandboxes WHERE org = ? AND id = ?`)
	if err != nil {
		raw.Close()
		return nil, "", fmt.Errorf("store: %w", err)
	}
	db := &orgDB{DB: raw, get: get}
	s.orgs[org] = db
	return db, org, nil
}

const columns = `id, org, class, project, status, image, runtime, workdir, name, uid, volume, created_at, last_used_at, expires_at, error, checkpoint, metadata, network, public_ports`

func scan(row interface{ Scan(...any) error }) (*sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	var status string
	var created, used, expires int64
	var meta, network, public string
	err := row.Scan(&sb.ID, &sb.Org, &sb.Class, &sb.Project, &status, &sb.Image, &sb.Runtime, &sb.Workdir,
		&sb.Name, &sb.UID, &sb.Volume, &created, &used, &expires, &sb.Error, &sb.Checkpoint, &meta, &network, &public)
	if err != nil {
		return nil, err
	}
	if meta != "{}" && meta != "" {
		if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
			return nil, fmt.Errorf("metadata of %s: %w", sb.ID, err)
		}
	}
	if network != "" {
		sb.Network = new(netpolicy.Policy)
		if err := json.Unmarshal([]byte(network), sb.Network); err != nil {
			return nil, fmt.Errorf("network policy of %s: %w", sb.ID, err)
		}
	}
	if public != "" {
		if err := json.Unmarshal([]byte(public), &sb.PublicPorts); err != nil {
			return nil, fmt.Errorf("public ports of %s: %w", sb.ID, err)
		}
	}
	sb.Status = sandbox.Status(status)
	sb.MemoryKept = sb.Checkpoint != ""
	sb.CreatedAt, sb.LastUsedAt, sb.ExpiresAt = fromMillis(created), fromMillis(used), fromMillis(expires)
	return &sb, nil
}

func metadataJSON(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// portsJSON is the stored form of public ports: "" for none.
func portsJSON(ports []int) string {
	if len(ports) == 0 {
		return ""
	}
	b, _ := json.Marshal(ports)
	return string(b)
}

// networkJSON is the stored form of p: "" for nil (leased with no
// network), "{}" for a policy that allows nothing (an interface, closed).
func networkJSON(p *netpolicy.Policy) string {
	if p == nil {
		return ""
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// SetNetwork replaces a sandbox's egress policy.
func (s *Store) SetNetwork(ctx context.Context, id string, p *netpolicy.Policy) error {
	return s.exec(ctx, `UPDATE sandboxes SET network = ? WHERE org = ? AND id = ?`, networkJSON(p), id)
}

// SetMetadata replaces a sandbox's metadata.
func (s *Store) SetMetadata(ctx context.Context, id string, m map[string]string) error {
	return s.exec(ctx, `UPDATE sandboxes SET metadata = ? WHERE org = ? AND id = ?`, metadataJSON(m), id)
}

func millis(t time.Time) int64      { return t.UnixMilli() }
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

var errNotFound = sandbox.Errorf(sandbox.KindNotFound, "sandbox not found")

// Get returns one sandbox of the caller's org. Another org's id is not found,
// exactly like an unknown one.
func (s *Store) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := scan(db.get.QueryRowContext(ctx, org, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	return sb, nil
}

// Filter narrows List. Zero fields do not filter.
type Filter struct {
	Project string
	Status  sandbox.Status
	// Metadata keeps the sandboxes whose metadata has each key with its
	// value.
	Metadata map[string]string
	Limit    int // 0 = 1000
	// After, when set, starts the page after this sandbox in the order
	// (created_at DESC, id DESC): keyset paging, stable under inserts.
	After *Position
}

// Position is a sandbox's place in the list order.
type Position struct {
	CreatedAt time.Time
	ID        string
}

// List returns the org's sandboxes, newest first.
func (s *Store) List(ctx context.Context, f Filter) ([]*sandbox.Sandbox, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	q := `SELECT ` + columns + ` FROM sandboxes WHERE org = ?`
	args := []any{org}
	if f.Project != "" {
		q += ` AND project = ?`
		args = append(args, f.Project)
	}
	if f.Status != "" {
		q += ` AND status = ?`
		args = append(args, string(f.Status))
	}
	// Keys are checked by the service (sandbox.CheckMetadata): a key is
	// quoted into the JSON path, never a path of the caller's making.
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		q += ` AND json_extract(metadata, ?) = ?`
		args = append(args, `$."`+k+`"`, f.Metadata[k])
	}
	if f.After != nil {
		at := millis(f.After.CreatedAt)
		q += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, at, at, f.After.ID)
	}
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, f.Limit)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	defer rows.Close()
	out := []*sandbox.Sandbox{}
	for rows.Next() {
		sb, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list: %w", err)
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// LiveInProject returns the live sandbox (pending, running or sleeping: one
// that holds the project) of project, or nil.
func (s *Store) LiveInProject(ctx context.Context, project string) (*sandbox.Sandbox, error) {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return nil, err
	}
	return liveInProject(ctx, db, org, project)
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

func liveInProject(ctx context.Context, q querier, org, project string) (*sandbox.Sandbox, error) {
	sb, err := scan(q.QueryRowContext(ctx, `SELECT `+columns+` FROM sandboxes
		WHERE org = ? AND project = ? AND status IN ('pending', 'running', 'sleeping') LIMIT 1`, org, project))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: project: %w", err)
	}
	return sb, nil
}

// ErrProjectBusy is returned by Insert when a racing lease won the
// project; the caller turns it into the same answer as its read-only check.
var ErrProjectBusy = errors.New("store: project has a live sandbox")

// Admit decides, inside the insert's write transaction, whether the org's
// use (as it is, before this row) leaves room for the new sandbox;
// newProject says the lease would create its project. An error refuses
// the insert and is returned as is.
type Admit func(u quota.Use, newProject bool) error

// Insert writes a new row (status pending), and records its project, after
// re-checking inside one write transaction that the project is free and
// that admit lets the org's use grow: two racing leases cannot both pass.
func (s *Store) Insert(ctx context.Context, sb *sandbox.Sandbox, admit Admit) error {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return err
	}
	sb.Org = org
	if len(sb.PublicPorts) > 0 {
		// Indexed first: an insert that fails after leaves a row that
		// points at no sandbox, which a lookup refuses.
		if _, err := s.control.ExecContext(ctx, `INSERT OR REPLACE INTO public_previews (id, org) VALUES (?, ?)`, sb.ID, org); err != nil {
			return fmt.Errorf("store: insert: public previews: %w", err)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: insert: %w", err)
	}
	defer tx.Rollback()
	newProject := false
	if sb.Project != "" {
		live, err := liveInProject(ctx, tx, org, sb.Project)
		if err != nil {
			return err
		}
		if live != nil {
			return fmt.Errorf("%w: %s", ErrProjectBusy, live.ID)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM projects WHERE org = ? AND name = ?`, org, sb.Project).Scan(&n); err != nil {
			return fmt.Errorf("store: insert: %w", err)
		}
		newProject = n == 0
	}
	if admit != nil {
		u, err := use(ctx, tx, org)
		if err != nil {
			return err
		}
		if err := admit(u, newProject); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes (`+columns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sb.ID, org, sb.Class, sb.Project, string(sb.Status), sb.Image, sb.Runtime, sb.Workdir, sb.Name, sb.UID, sb.Volume,
		millis(sb.CreatedAt), millis(sb.LastUsedAt), millis(sb.ExpiresAt), sb.Error, sb.Checkpoint, metadataJSON(sb.Metadata), networkJSON(sb.Network), portsJSON(sb.PublicPorts))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") && sb.Project != "" {
			return ErrProjectBusy
		}
		return fmt.Errorf("store: insert: %w", err)
	}
	if sb.Project != "" {
		_, err = tx.ExecContext(ctx, `INSERT INTO projects (org, name, volume, size_mib, created_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (org, name) DO UPDATE SET last_used_at = excluded.last_used_at`,
			org, sb.Project, sb.Volume, sandbox.MustClass(sb.Class).Limits.VolumeMiB, millis(sb.CreatedAt), millis(sb.CreatedAt))
		if err != nil {
			return fmt.Errorf("store: insert: project: %w", err)
		}
	}
	return tx.Commit()
}

// ErrStale means the row was no longer in the status a change was made
// from: another call moved it first. Nothing was written.
var ErrStale = errors.New("store: the sandbox's status changed meanwhile")

// Transition moves the row from status from to next.Status, writing next's
// runtime object (name, identity), checkpoint and error reason; a move to
// sandbox.StatusEnded deletes the row. It is a compare-and-set: when the
// row is not in from, nothing is written and the answer is ErrStale; when
// there is no row, KindNotFound. Which moves are allowed is the domain's
// table (sandbox.CheckTransition), applied by the service.
func (s *Store) Transition(ctx context.Context, id string, from sandbox.Status, next *sandbox.Sandbox) error {
	var err error
	if next.Status == sandbox.StatusEnded {
		err = s.exec(ctx, `DELETE FROM sandboxes WHERE status = ? AND org = ? AND id = ?`, string(from), id)
		if err == nil {
			org, _ := sandbox.OrgRequired(ctx)
			s.control.ExecContext(ctx, `DELETE FROM public_previews WHERE id = ? AND org = ?`, id, org) // a leftover is refused anyway
		}
	} else {
		err = s.exec(ctx, `UPDATE sandboxes SET status = ?, name = ?, uid = ?, checkpoint = ?, error = ?
			WHERE status = ? AND org = ? AND id = ?`,
			string(next.Status), next.Name, next.UID, next.Checkpoint, next.Error, string(from), id)
	}
	if errors.Is(err, errNotFound) {
		if _, gerr := s.Get(ctx, id); gerr == nil {
			return ErrStale
		}
	}
	return err
}

// Touch stamps last use.
func (s *Store) Touch(ctx context.Context, id string, at time.Time) error {
	return s.exec(ctx, `UPDATE sandboxes SET last_used_at = ? WHERE org = ? AND id = ?`, millis(at), id)
}

// SetExpiry records a renewed lease.
func (s *Store) SetExpiry(ctx context.Context, id string, at time.Time) error {
	return s.exec(ctx, `UPDATE sandboxes SET expires_at = ? WHERE org = ? AND id = ?`, millis(at), id)
}

// exec runs an org-scoped update whose org argument goes in second-to-last
// place followed by id; zero rows affected is not found.
func (s *Store) exec(ctx context.Context, q string, args ...any) error {
	db, org, err := s.orgDB(ctx)
	if err != nil {
		return err
	}
	id := args[len(args)-1]
	args = append(args[:len(args)-1], org, id)
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound
	}
	return nil
}

var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// The scopes of an API key: a closed set.
const (
	// ScopeTenant is the org's sandboxes and everything on them: every
	// route but the key and operator routes. The default.
	ScopeTenant = "tenant"
	// ScopeAdmin is also the org's own keys; with the operator org, the
	// operator routes (every org's keys and quotas, /metrics).
	ScopeAdmin = "admin"
)

// CheckScope is nil for a known scope, else KindInvalid naming the known
// ones.
func CheckScope(scope string) error {
	if scope != ScopeTenant && scope != ScopeAdmin {
		return sandbox.Errorf(sandbox.KindInvalid, "unknown key scope %q: the scopes are %s and %s", scope, ScopeTenant, ScopeAdmin)
	}
	return nil
}

// CreateKey mints a tenant-scoped API key for org, without expiry (see
// MintKey).
func (s *Store) CreateKey(ctx context.Context, org, subject string) (string, error) {
	key, _, err := s.MintKey(ctx, org, subject, ScopeTenant, time.Time{})
	return key, err
}

// CreateAdminKey is CreateKey with the admin scope.
func (s *Store) CreateAdminKey(ctx context.Context, org, subject string) (string, error) {
	key, _, err := s.MintKey(ctx, org, subject, ScopeAdmin, time.Time{})
	return key, err
}

// Key is an API key as it can be shown: never its secret.
type Key = wire.Key

// keyID is a key's public id: a prefix of its hash, which says nothing of
// the secret.
func keyID(hash string) string { return "key_" + hash[:16] }

// MintKey mints an API key for org with scope (ScopeTenant or ScopeAdmin,
// else KindInvalid), expiring at expires unless zero, and stores only its
// hash. The secret is returned once; it cannot be read back. Whether the
// caller may give that scope is the caller's to decide.
func (s *Store) MintKey(ctx context.Context, org, subject, scope string, expires time.Time) (string, Key, error) {
	if strings.TrimSpace(org) == "" || len(org) > 128 {
		return "", Key{}, sandbox.Errorf(sandbox.KindInvalid, "org must be 1-128 characters")
	}
	if err := CheckScope(scope); err != nil {
		return "", Key{}, err
	}
	b := make([]byte, 32)
	rand.Read(b)
	secret := KeyPrefix + keyEncoding.EncodeToString(b)
	h := hashKey(secret)
	now := time.Now().UTC().Truncate(time.Millisecond)
	exp := int64(0)
	if !expires.IsZero() {
		exp = millis(expires)
	}
	_, err := s.control.ExecContext(ctx, `INSERT INTO api_keys (hash, org, subject, prefix, scope, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		h, org, subject, secret[:10], scope, millis(now), exp)
	if err != nil {
		return "", Key{}, fmt.Errorf("store: create key: %w", err)
	}
	k := Key{ID: keyID(h), Org: org, Subject: subject, Prefix: secret[:10], Scope: scope, CreatedAt: now}
	if exp != 0 {
		k.ExpiresAt = fromMillis(exp)
	}
	return secret, k, nil
}

// KeyPrefix begins every API key, and keyChars follow it: MintKey's 32
// random bytes in keyEncoding (a-z, 2-7), 256 bits.
const (
	KeyPrefix = "sbk_"
	keyChars  = 52
)

// CheckKeyFormat is nil for a secret shaped as MintKey makes them: KeyPrefix
// and 52 characters of a-z and 2-7. Else KindInvalid, in words that never
// repeat the secret. Only the shape is checked: a key brought by the
// operator (EnsureKey) must come from a random source, as the chart's does.
func CheckKeyFormat(secret string) error {
	rest, ok := strings.CutPrefix(secret, KeyPrefix)
	if !ok {
		return sandbox.Errorf(sandbox.KindInvalid, "an API key begins with %q", KeyPrefix)
	}
	if len(rest) != keyChars {
		return sandbox.Errorf(sandbox.KindInvalid, "an API key is %q and %d characters, not %d", KeyPrefix, keyChars, len(rest))
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return sandbox.Errorf(sandbox.KindInvalid, "an API key's characters after %q are a-z and 2-7 only (character %d is not)", KeyPrefix, len(KeyPrefix)+i+1)
		}
	}
	return nil
}

// EnsureKey makes secret an API key of org with scope and no expiry, the
// way MintKey would have stored it (only its hash), unless it already is
// one: then nothing changes, so a server that ensures its bootstrap key at
// every start keeps one row. created says which. KindInvalid for a
// malformed secret (CheckKeyFormat) or scope; KindConflict when the secret
// is already a key of another org or scope (it is never moved or widened).
// A key that was revoked is made again: the caller's word is that it works.
func (s *Store) EnsureKey(ctx context.Context, org, subject, scope, secret string) (Key, bool, error) {
	if strings.TrimSpace(org) == "" || len(org) > 128 {
		return Key{}, false, sandbox.Errorf(sandbox.KindInvalid, "org must be 1-128 characters")
	}
	if err := CheckScope(scope); err != nil {
		return Key{}, false, err
	}
	if err := CheckKeyFormat(secret); err != nil {
		return Key{}, false, err
	}
	h := hashKey(secret)
	now := time.Now().UTC().Truncate(time.Millisecond)
	res, err := s.control.ExecContext(ctx, `INSERT INTO api_keys (hash, org, subject, prefix, scope, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, 0)
		ON CONFLICT (hash) DO NOTHING`, h, org, subject, secret[:10], scope, millis(now))
	if err != nil {
		return Key{}, false, fmt.Errorf("store: ensure key: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return Key{ID: keyID(h), Org: org, Subject: subject, Prefix: secret[:10], Scope: scope, CreatedAt: now}, true, nil
	}
	k := Key{ID: keyID(h), Prefix: secret[:10]}
	var created, exp int64
	err = s.control.QueryRowContext(ctx, `SELECT org, subject, scope, created_at, expires_at FROM api_keys WHERE hash = ?`, h).
		Scan(&k.Org, &k.Subject, &k.Scope, &created, &exp)
	if err != nil {
		return Key{}, false, fmt.Errorf("store: ensure key: %w", err)
	}
	k.CreatedAt = fromMillis(created)
	if k.Org != org || k.Scope != scope || exp != 0 {
		return Key{}, false, sandbox.Errorf(sandbox.KindConflict, "the key %s is already a %s key of org %q (expiring: %v), not a %s key of %q without expiry: give another secret", k.ID, k.Scope, k.Org, exp != 0, scope, org)
	}
	return k, false, nil
}

// touchEvery bounds how often a key's last use is written.
const touchEvery = time.Minute

// Principal resolves an API key, or KindUnauthorized; an admin-scoped key
// is an Admin principal. It asks the control database every time (about
// 10 µs): a key revoked or expired — by the server or by the CLI on the
// data directory — stops working at once.
func (s *Store) Principal(ctx context.Context, key string) (sandbox.Principal, error) {
	h := hashKey(key)
	var p sandbox.Principal
	var scope string
	var used, exp int64
	err := s.control.QueryRowContext(ctx, `SELECT org, subject, scope, last_used_at, expires_at FROM api_keys WHERE hash = ?`, h).
		Scan(&p.Org, &p.Subject, &scope, &used, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return p, sandbox.Errorf(sandbox.KindUnauthorized, "invalid API key")
	}
	if err != nil {
		return p, fmt.Errorf("store: key: %w", err)
	}
	now := time.Now()
	if exp != 0 && !now.Before(fromMillis(exp)) {
		return sandbox.Principal{}, sandbox.Errorf(sandbox.KindUnauthorized, "the API key has expired")
	}
	if now.Sub(fromMillis(used)) >= touchEvery {
		if _, err := s.control.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE hash = ?`, millis(now), h); err != nil {
			return p, fmt.Errorf("store: key: %w", err)
		}
	}
	p.Key, p.Admin = keyID(h), scope == ScopeAdmin
	return p, nil
}

// KeyActive reports whether the key of id still works (not revoked, not
// expired): long connections ask it, to end once their key is revoked.
func (s *Store) KeyActive(ctx context.Context, id string) (bool, error) {
	var exp int64
	err := s.control.QueryRowContext(ctx, `SELECT expires_at FROM api_keys WHERE substr(hash, 1, 16) = ?`, strings.TrimPrefix(id, "key_")).Scan(&exp)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: key: %w", err)
	}
	return exp == 0 || time.Now().Before(fromMillis(exp)), nil
}

// Keys lists org's keys, oldest first.
func (s *Store) Keys(ctx context.Context, org string) ([]Key, error) {
	rows, err := s.control.QueryContext(ctx, `SELECT hash, org, subject, prefix, scope, created_at, last_used_at, expires_at
		FROM api_keys WHERE org = ? ORDER BY created_at, hash`, org)
	if err != nil {
		return nil, fmt.Errorf("store: keys: %w", err)
	}
	defer rows.Close()
	out := []Key{}
	for rows.Next() {
		var k Key
		var h string
		var created, used, exp int64
		if err := rows.Scan(&h, &k.Org, &k.Subject, &k.Prefix, &k.Scope, &created, &used, &exp); err != nil {
			return nil, fmt.Errorf("store: keys: %w", err)
		}
		k.ID, k.CreatedAt = keyID(h), fromMillis(created)
		if used != 0 {
			k.LastUsedAt = fromMillis(used)
		}
		if exp != 0 {
			k.ExpiresAt = fromMillis(exp)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey deletes the key of id (of org, when org is not empty): it
// stops working at once. An unknown id is KindNotFound.
func (s *Store) RevokeKey(ctx context.Context, org, id string) error {
	q := `DELETE FROM api_keys WHERE substr(hash, 1, 16) = ?`
	args := []any{strings.TrimPrefix(id, "key_")}
	if org != "" {
		q += ` AND org = ?`
		args = append(args, org)
	}
	if !strings.HasPrefix(id, "key_") || len(id) != 20 {
		return sandbox.Errorf(sandbox.KindNotFound, "no key %q", id)
	}
	res, err := s.control.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("store: revoke: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return sandbox.Errorf(sandbox.KindNotFound, "no key %q", id)
	}
	return nil
}

// PublicOrg is the org of sandbox id if its lease asked for public
// ports ("" if none did).
func (s *Store) PublicOrg(ctx context.Context, id string) (string, error) {
	var org string
	err := s.control.QueryRowContext(ctx, `SELECT org FROM public_previews WHERE id = ?`, id).Scan(&org)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: public previews: %w", err)
	}
	return org, nil
}

// Orgs lists every org that has a store, for background work that visits
// each one.
func (s *Store) Orgs(ctx context.Context) ([]string, error) {
	rows, err := s.control.QueryContext(ctx, `SELECT name FROM orgs ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: orgs: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("store: orgs: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
