package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/identity"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

// TestEnsureBootstrapKey: the file's key becomes an admin key of the
// operator org once, however many starts ensure it, and authenticates as
// the operator's admin; the log names its id, never its secret.
func TestEnsureBootstrapKey(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	secret := store.KeyPrefix + strings.Repeat("k2", 26)
	path := filepath.Join(t.TempDir(), "admin-key")
	// A Secret volume's file: group-readable, with a trailing newline.
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for start := 0; start < 3; start++ {
		st, err := store.Open(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		if err := ensureBootstrapKey(ctx, st, path, "ops", log); err != nil {
			st.Close()
			t.Fatalf("start %d: %v", start, err)
		}
		ks, err := st.Keys(ctx, "ops")
		if err != nil || len(ks) != 1 || ks[0].Scope != store.ScopeAdmin || ks[0].Subject != BootstrapSubject {
			st.Close()
			t.Fatalf("start %d: the operator org's keys are %+v, %v; want the one bootstrap admin key", start, ks, err)
		}
		p, err := (&identity.Authenticator{Keys: st}).Principal(ctx, secret)
		st.Close()
		if err != nil || p.Org != "ops" || !p.Admin {
			t.Fatalf("start %d: the key authenticates as %+v, %v; want the operator's admin", start, p, err)
		}
	}
	if n := strings.Count(logs.String(), "created=true"); n != 1 {
		t.Errorf("the key was created %d times:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), secret[len(store.KeyPrefix):]) {
		t.Errorf("the log has the secret:\n%s", logs.String())
	}
	if err := ensureBootstrapKey(ctx, nil, "", "ops", log); err != nil {
		t.Errorf("no file: %v", err)
	}
}

// TestBootstrapKeyRefused: a start with a malformed, empty or missing key
// file fails, naming the file and what is wrong but not the key.
func TestBootstrapKeyRefused(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"uppercase": store.KeyPrefix + strings.Repeat("A", 52),
		"short":     store.KeyPrefix + "abc",
		"noprefix":  strings.Repeat("a", 56),
		"two keys":  store.KeyPrefix + strings.Repeat("a", 52) + "\n" + store.KeyPrefix + strings.Repeat("b", 52),
		"empty":     "\n",
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			// New checks the key before it opens a runtime: no runsc is needed.
			_, err := New(context.Background(), Config{Data: t.TempDir(), BootstrapKeyFile: path, Runner: ""}, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatal("the start was not refused")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("the error does not name the file: %v", err)
			}
			if name != "empty" && !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("want an invalid-key error, got %v", err)
			}
			if k := strings.TrimSpace(content); len(k) > 8 && strings.Contains(err.Error(), k[4:]) {
				t.Errorf("the error repeats the key: %v", err)
			}
		})
	}
	_, err := New(context.Background(), Config{Data: t.TempDir(), BootstrapKeyFile: filepath.Join(dir, "missing")}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
