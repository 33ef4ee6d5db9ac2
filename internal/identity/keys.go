package identity

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// ring is the issuer's signing keys: one file a key in DATA/identity/keys
// (0600 in a 0700 directory), the newest signing, the older ones still
// published while tokens they signed may live. A private key is never in
// an answer or a log line: only public() leaves this file.
type ring struct {
	dir      string
	rotation time.Duration
	// keep is how long a key is published after it stopped signing: the
	// longest a token it signed can live.
	keep time.Duration

	mu   sync.RWMutex
	keys []ringKey // oldest first
	now  func() time.Time
}

type ringKey struct {
	ID      string          `json:"kid"`
	Created time.Time       `json:"created"`
	JWK     jose.JSONWebKey `json:"jwk"`
}

// keyBits is the RSA size: RS256 is what every OIDC library verifies, and
// RSA verification (what every request pays) is the cheapest of the JOSE
// signatures.
const keyBits = 2048

func openRing(dir string, rotation, keep time.Duration) (*ring, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	r := &ring{dir: dir, rotation: rotation, keep: keep, now: time.Now}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("identity: the signing key %s is readable by others (mode %v): it must be the server's alone (0600)", n, st.Mode().Perm())
		}
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		var k ringKey
		if err := json.Unmarshal(b, &k); err != nil {
			return nil, fmt.Errorf("identity: key %s: %w", filepath.Base(n), err)
		}
		if _, ok := k.JWK.Key.(*rsa.PrivateKey); !ok || k.ID == "" || k.JWK.KeyID != k.ID {
			return nil, fmt.Errorf("identity: key %s is not an RSA private key of its id", filepath.Base(n))
		}
		r.keys = append(r.keys, k)
	}
	slices.SortFunc(r.keys, func(a, b ringKey) int { return a.Created.Compare(b.Created) })
	if _, err := r.Rotate(false); err != nil {
		return nil, err
	}
	return r, nil
}

// Rotate makes a new signing key when the current one is older than the
// rotation (or force), and drops keys nothing they signed can still use.
// It reports whether a key was made.
func (r *ring) Rotate(force bool) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	made := false
	if n := len(r.keys); force || n == 0 || now.Sub(r.keys[n-1].Created) >= r.rotation {
		k, err := r.make(now)
		if err != nil {
			return false, err
		}
		r.keys = append(r.keys, k)
		made = true
	}
	// A key stopped signing when its successor was made.
	for len(r.keys) > 1 && now.Sub(r.keys[1].Created) > r.keep {
		if err := os.Remove(filepath.Join(r.dir, r.keys[0].ID+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return made, fmt.Errorf("identity: %w", err)
		}
		r.keys = r.keys[1:]
	}
	return made, nil
}

// make generates a key and writes it (a temporary file renamed, so a
// crash leaves a whole key or none).
func (r *ring) make(now time.Time) (ringKey, error) {
	priv, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		return ringKey{}, err
	}
	id := make([]byte, 8)
	rand.Read(id)
	k := ringKey{ID: now.UTC().Format("20060102") + "-" + hex.EncodeToString(id), Created: now.UTC()}
	k.JWK = jose.JSONWebKey{Key: priv, KeyID: k.ID, Algorithm: string(jose.RS256), Use: "sig"}
	b, err := json.Marshal(k)
	if err != nil {
		return ringKey{}, err
	}
	if err := writeSynced(filepath.Join(r.dir, k.ID+".json"), b); err != nil {
		return ringKey{}, err
	}
	return k, nil
}

// signing is the newest key.
func (r *ring) signing() ringKey {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.keys[len(r.keys)-1]
}

// public is the JWKS: every kept key's public half.
func (r *ring) public() jose.JSONWebKeySet {
	r.mu.RLock()
	defer r.mu.RUnlock()
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(r.keys))}
	for i := len(r.keys) - 1; i >= 0; i-- {
		set.Keys = append(set.Keys, r.keys[i].JWK.Public())
	}
	return set
}

// lookup is the public key of kid, if kept.
func (r *ring) lookup(kid string) (jose.JSONWebKey, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, k := range r.keys {
		if k.ID == kid {
			return k.JWK.Public(), true
		}
	}
	return jose.JSONWebKey{}, false
}

// ReadSecret reads a client secret that must exist (0600 or stricter).
func ReadSecret(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("identity: %s is readable by others (mode %v); chmod 600 it", path, st.Mode().Perm())
	}
	return loadSecret(path)
}

// loadSecret reads the client secret at path, making one on the first
// start.
func loadSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < 16 {
			return "", fmt.Errorf("identity: the client secret in %s is shorter than 16 characters", path)
		}
		return s, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("identity: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("identity: %w", err)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	s := hex.EncodeToString(raw)
	if err := writeSynced(path, []byte(s+"\n")); err != nil {
		return "", err
	}
	return s, nil
}

// writeSynced writes b to path whole or not at all: a temporary file of
// 0600, synced, then renamed, then the directory synced — a crash leaves
// the old file or the new one, never an empty one the next start would
// refuse.
func writeSynced(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
