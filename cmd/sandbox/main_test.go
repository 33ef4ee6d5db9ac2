package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func images() string { return testenv.Images() }

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"serve"},
		{"serve", "--data", t.TempDir(), "--reap-every", "-1s"},
		{"serve", "--data", t.TempDir(), "--exec-timeout", "20m"}, // above --max-exec-timeout
		{"serve", "--data", t.TempDir(), "--idle-after", "-1s"},
		{"serve", "--data", t.TempDir(), "--frame-ancestors", "'self'; script-src *"},
		{"serve", "--data", t.TempDir(), "--runtime", "docker"},
		{"serve", "--data", t.TempDir(), "extra"},
		{"keys"},
		{"keys", "create", "--data", t.TempDir()},
		{"image"},
		{"image", "build"},
		{"image", "build", "android", "--images", t.TempDir()},
		{"image", "frobnicate"},
		{"image", "pull", "onlyname", "--data", t.TempDir()},
		{"image", "pull", "exec", "example.com/x:1", "--data", t.TempDir()}, // a class image's name
		{"image", "pull", "../x", "example.com/x:1", "--data", t.TempDir()},
		{"image", "pull", "x", "example.com/x:1", "--username", "u", "--data", t.TempDir()}, // a password only on stdin
		{"image", "pull", "x", "example.com/x:1", "--password-stdin", "--data", t.TempDir()},
		{"image", "import", "x", "--data", t.TempDir()},
		{"image", "rm", "--data", t.TempDir()},
		{"image", "gc", "--org", "acme", "--data", t.TempDir()},
		{"image", "gc", "--older-than", "-1h", "--data", t.TempDir()},
	} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("sandbox %v: no error", args)
		}
		if out.Len() != 0 {
			t.Errorf("sandbox %v wrote to stdout: %q", args, out.String())
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "sandbox serve") {
		t.Errorf("help: %v %q", err, out.String())
	}
}

// TestServeEndToEnd runs the real `serve` verb with a key from the real
// `keys create` verb, and drives it over HTTP like a user with curl would.
func TestServeEndToEnd(t *testing.T) {
	testenv.NeedGVisor(t, gvisor.DefaultRunsc(), "exec")
	data, err := os.MkdirTemp("", "sbc-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		unix.Unmount(filepath.Join(data, "runtime", "runsc", "null-netns"), unix.MNT_DETACH)
		os.RemoveAll(data)
	}()

	var keyOut bytes.Buffer
	if err := run(context.Background(), []string{"keys", "create", "--data", data, "--org", "acme"}, &keyOut, io.Discard); err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSuffix(keyOut.String(), "\n")
	if !strings.HasPrefix(key, "sbk_") || strings.ContainsAny(key, " \n") {
		t.Fatalf("keys create printed %q, want the key alone", keyOut.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data", data, "--listen", "127.0.0.1:0", "--images", images(), "--reap-every", "1s"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed nothing: %v (%v)", err, <-done)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "sandbox: listening on "))

	call := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	code, sb := call("POST", "/v1/sandbox", `{"ttlSec": 60}`)
	if code != http.StatusCreated {
		t.Fatalf("lease: %d %v", code, sb)
	}
	id := sb["id"].(string)
	code, res := call("POST", "/v1/sandbox/"+id+"/exec", `{"argv":["python3","-c","print(6*7)"]}`)
	if code != http.StatusOK || res["stdout"] != "42\n" {
		t.Errorf("exec: %d %v", code, res)
	}
	if code, _ := call("DELETE", "/v1/sandbox/"+id, ""); code != http.StatusOK {
		t.Errorf("delete: %d", code)
	}
	// SIGTERM's path: the context ends, the server drains and returns.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestQuotaVerb: set changes only what it names, get shows it, clear drops
// it, and a bad value changes nothing.
func TestQuotaVerb(t *testing.T) {
	data := t.TempDir()
	run1 := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"quota"}, append(args, "--data", data, "--org", "acme")...), &out, io.Discard)
		return out.String(), err
	}
	if out, err := run1("set", "--projects", "3", "--live", "dev=1"); err != nil || !strings.Contains(out, `"projects": 3`) {
		t.Fatalf("set: %v %s", err, out)
	}
	if out, err := run1("set", "--commands", "5"); err != nil || !strings.Contains(out, `"projects": 3`) || !strings.Contains(out, `"commands": 5`) {
		t.Fatalf("a second set kept the first: %v %s", err, out)
	}
	if _, err := run1("set", "--projects", "-2"); err == nil {
		t.Error("a negative quota was accepted")
	}
	if _, err := run1("set", "--live", "gpu=1"); err == nil {
		t.Error("an unknown class was accepted")
	}
	if out, err := run1("get"); err != nil || !strings.Contains(out, `"dev": 1`) {
		t.Errorf("get: %v %s", err, out)
	}
	if out, err := run1("clear"); err != nil || strings.Contains(out, "projects") {
		t.Errorf("clear: %v %s", err, out)
	}
}

// TestKeysVerb: create mints a tenant key unless --scope admin, refuses a
// scope outside the set before touching the data directory, and list shows
// each key's scope (and never its secret).
func TestKeysVerb(t *testing.T) {
	data := t.TempDir()
	run1 := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"keys"}, append(args, "--data", data, "--org", "acme")...), &out, io.Discard)
		return out.String(), err
	}
	tenant, err := run1("create", "--subject", "app")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := run1("create", "--subject", "ops", "--scope", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run1("create", "--scope", "root"); err == nil || !strings.Contains(err.Error(), "the scopes are tenant and admin") {
		t.Errorf("an unknown scope: %v", err)
	}
	out, err := run1("list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "SCOPE") {
		t.Fatalf("list printed %q", out)
	}
	scopes := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		scopes[f[1]] = f[2]
	}
	if scopes["app"] != "tenant" || scopes["ops"] != "admin" {
		t.Errorf("list's scopes %v in %q", scopes, out)
	}
	for _, secret := range []string{tenant, admin} {
		if strings.Contains(out, strings.TrimSpace(secret)[10:]) {
			t.Errorf("list shows a secret: %q", out)
		}
	}
}
