package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/meter"
	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
)

func TestAuthRequired(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, org string }{
		{"no header", ""},
		{"unknown key", "sbk_notakey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/sandbox", "/v1/sandboxes", "/v1/sandbox/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa"} {
				r := e.do("GET", path, tc.org, nil)
				if r.Status != http.StatusUnauthorized {
					t.Errorf("GET %s: %d, want 401", path, r.Status)
				}
				if msg, _ := r.JSON(t)["error"].(string); msg == "" {
					t.Errorf("GET %s: no error message: %s", path, r.Body)
				}
			}
			if r := e.do("POST", "/v1/sandbox", tc.org, map[string]any{}); r.Status != http.StatusUnauthorized {
				t.Errorf("lease: %d, want 401", r.Status)
			}
		})
	}
	// A malformed header is refused the same way.
	req, _ := http.NewRequest("GET", e.http.URL+"/v1/sandbox", nil)
	req.Header.Set("Authorization", "Basic "+e.keys["acme"])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic auth: %d, want 401", res.StatusCode)
	}
}

func TestExecSandboxLifecycle(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		before := time.Now()
		r := e.must(http.StatusCreated, "POST", "/v1/sandbox", "acme", map[string]any{"ttlSec": 120})
		sb := r.JSON(t)
		id := sb["id"].(string)
		if sb["status"] != "running" || sb["class"] != "exec" || sb["runtime"] != "gvisor" || sb["image"] != "exec" || sb["workdir"] != "/mnt/data" {
			t.Errorf("lease answer: %s", r.Body)
		}
		exp := unixTime(t, sb["expiresAt"])
		if d := exp.Sub(before); d < 118*time.Second || d > 125*time.Second {
			t.Errorf("expiresAt %v is not ttlSec after the lease", exp)
		}

		// The alias answers identically.
		a := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)
		b := e.must(http.StatusOK, "GET", "/v1/sandboxes/"+id, "acme", nil).JSON(t)
		if a["id"] != id || b["id"] != id || a["status"] != "running" {
			t.Errorf("get: %v / %v", a, b)
		}

		t.Run("exec", func(t *testing.T) {
			if out := e.exec("acme", id, map[string]any{"argv": []string{"echo", "-n", "hello", "world"}}); out.Stdout != "hello world" || out.ExitCode != 0 {
				t.Errorf("argv: %+v", out)
			}
			if out := e.exec("acme", id, map[string]any{"command": "echo out; echo err >&2; exit 3"}); out.ExitCode != 3 || out.Stdout != "out\n" || out.Stderr != "err\n" {
				t.Errorf("command with exit 3: %+v", out)
			}
			if out := e.exec("acme", id, map[string]any{"argv": []string{"cat"}, "stdin": "from stdin"}); out.Stdout != "from stdin" {
				t.Errorf("stdin: %+v", out)
			}
			if out := e.exec("acme", id, map[string]any{"command": "echo $GREETING; pwd; id -u", "env": map[string]string{"GREETING": "hi"}, "dir": "sub"}); out.ExitCode == 0 {
				t.Errorf("dir that does not exist should fail: %+v", out)
			}
			e.sh("acme", id, "mkdir -p sub")
			if out := e.exec("acme", id, map[string]any{"command": "echo $GREETING; pwd; id -u", "env": map[string]string{"GREETING": "hi"}, "dir": "sub"}); out.Stdout != "hi\n/mnt/data/sub\n1000\n" {
				t.Errorf("env, dir, uid: %+v", out)
			}
			if out := e.exec("acme", id, map[string]any{"argv": []string{"no-such-program"}}); out.ExitCode != 127 {
				t.Errorf("missing program: %+v", out)
			}
			// 5 s, not 1: the timeout counts from the command's request, and
			// on a cluster under CI's load the exec's start alone (apiserver,
			// kubelet, runsc) once took over a second: the shell had not yet
			// said "started" when it was killed.
			start := time.Now()
			out := e.exec("acme", id, map[string]any{"command": "echo started; sleep 30", "timeoutSec": 5})
			if !out.TimedOut || out.ExitCode != 124 || !strings.HasPrefix(out.Stdout, "started") || time.Since(start) > 15*time.Second {
				t.Errorf("timeout: %+v after %v", out, time.Since(start))
			}
			// The timed-out program really died inside, not only its client.
			if ps := e.sh("acme", id, "ps -eo args"); strings.Contains(ps, "sleep 30") {
				t.Errorf("timed-out program still runs:\n%s", ps)
			}
			big := e.exec("acme", id, map[string]any{"command": "head -c 3000000 /dev/zero | tr '\\0' a"})
			if len(big.Stdout) > 1<<20+200 || !strings.Contains(big.Stdout, "truncated") {
				t.Errorf("output cap: %d bytes, tail %q", len(big.Stdout), big.Stdout[max(0, len(big.Stdout)-100):])
			}
		})

		t.Run("exec refusals", func(t *testing.T) {
			for _, body := range []any{
				map[string]any{},
				map[string]any{"argv": []string{}},
				map[string]any{"command": "true", "env": map[string]string{"BAD KEY": "x"}},
				map[string]any{"command": "true", "dir": "../etc"},
				map[string]any{"command": "true", "dir": "/etc"},
				map[string]any{"command": "true", "timeoutSec": -1},
				map[string]any{"command": "true", "surprise": 1},
				`{"command": "true"} {"command": "true"}`,
				`{"argv": "not a list"}`,
				`not json`,
			} {
				if r := e.do("POST", "/v1/sandbox/"+id+"/exec", "acme", body); r.Status != http.StatusBadRequest {
					t.Errorf("%v: %d, want 400: %s", body, r.Status, r.Body)
				}
			}
		})

		t.Run("list", func(t *testing.T) {
			id2 := e.lease("acme", map[string]any{"project": "p2"})
			list := e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil)
			var l struct{ Sandboxes []map[string]any }
			json.Unmarshal(list.Body, &l)
			if len(l.Sandboxes) != 2 || l.Sandboxes[0]["id"] != id2 || l.Sandboxes[1]["id"] != id {
				t.Errorf("list is not newest first: %s", list.Body)
			}
			json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandboxes?project=p2", "acme", nil).Body, &l)
			if len(l.Sandboxes) != 1 || l.Sandboxes[0]["id"] != id2 {
				t.Errorf("project filter: %v", l.Sandboxes)
			}
			json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox?status=error", "acme", nil).Body, &l)
			if len(l.Sandboxes) != 0 {
				t.Errorf("status filter: %v", l.Sandboxes)
			}
			e.must(http.StatusBadRequest, "GET", "/v1/sandbox?status=bogus", "acme", nil)
			e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id2, "acme", nil)
		})

		t.Run("renew", func(t *testing.T) {
			r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/renew", "acme", map[string]any{"ttlSec": 3600})
			exp := unixTime(t, r.JSON(t)["expiresAt"])
			if d := time.Until(exp); d < 59*time.Minute || d > 61*time.Minute {
				t.Errorf("renewed expiry %v", exp)
			}
			// Never past the ceiling (24 h from creation).
			r = e.must(http.StatusOK, "POST", "/v1/sandboxes/"+id+"/renew", "acme", map[string]any{"ttlSec": 10 * 86400})
			exp = unixTime(t, r.JSON(t)["expiresAt"])
			created := unixTime(t, r.JSON(t)["createdAt"])
			if exp.Sub(created) > 24*time.Hour+time.Second {
				t.Errorf("renew went past the ceiling: created %v, expires %v", created, exp)
			}
			e.must(http.StatusBadRequest, "POST", "/v1/sandbox/"+id+"/renew", "acme", map[string]any{"ttlSec": "long"})
		})

		t.Run("end", func(t *testing.T) {
			e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
			e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id, "acme", nil)
			e.must(http.StatusNotFound, "DELETE", "/v1/sandbox/"+id, "acme", nil)
			objs, err := e.srv.Runtime.List(t.Context(), nil)
			if err != nil || len(objs) != 0 {
				t.Errorf("runtime objects after end: %v %v", objs, err)
			}
		})
	})
}

func TestLeaseChecks(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnv(t, "dev")
	for _, tc := range []struct {
		name string
		body any
		want int
		msg  string
	}{
		{"unknown class", map[string]any{"class": "gpu"}, 400, "android, desktop, dev, exec"},
		{"image not allowed", map[string]any{"image": "ubuntu:latest"}, 400, `no image \"ubuntu:latest\" in your org or on this server`},
		{"image not buildable here", map[string]any{"class": "android", "project": "p"}, 400, "needs /dev/kvm"},
		{"dev without project", map[string]any{"class": "dev"}, 400, "needs a project"},
		{"bad project name", map[string]any{"project": "../etc"}, 400, "project"},
		{"runc refused", map[string]any{"runtime": "runc"}, 400, "never granted"},
		{"kata-fc with volume", map[string]any{"runtime": "kata-fc", "project": "p"}, 400, "volume"},
		{"runtime not offered", map[string]any{"runtime": "kata-clh"}, 400, "not offered"},
		{"unknown runtime", map[string]any{"runtime": "docker"}, 400, "unknown runtime"},
		{"unknown field", map[string]any{"org": "globex"}, 400, "unknown field"},
		{"wrong type", `{"ttlSec": "soon"}`, 400, "ttlSec"},
		{"not json", `{`, 400, "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/sandbox", "acme", tc.body)
			if r.Status != tc.want || !strings.Contains(string(r.Body), tc.msg) {
				t.Errorf("%d %s, want %d with %q", r.Status, r.Body, tc.want, tc.msg)
			}
		})
	}
	// Nothing was left behind by any refusal.
	var l struct{ Sandboxes []map[string]any }
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).Body, &l)
	if len(l.Sandboxes) != 0 {
		t.Errorf("refusals left rows: %v", l.Sandboxes)
	}

	t.Run("image not built", func(t *testing.T) {
		// A server whose images directory has exec and dev only.
		dir := t.TempDir()
		for _, name := range []string{"exec", "dev"} {
			if err := os.Symlink(filepath.Join(imagesDir(), name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		e2 := newEnvImages(t, dir)
		r := e2.must(http.StatusBadRequest, "POST", "/v1/sandbox", "acme", map[string]any{"class": "desktop", "project": "p"})
		if !strings.Contains(string(r.Body), "sandbox image build desktop") {
			t.Errorf("answer does not say how to build it: %s", r.Body)
		}
	})

	t.Run("project busy", func(t *testing.T) {
		id := e.lease("acme", map[string]any{"project": "shared"})
		r := e.must(http.StatusConflict, "POST", "/v1/sandbox", "acme", map[string]any{"project": "shared"})
		if !strings.Contains(string(r.Body), id) {
			t.Errorf("409 does not name the live sandbox %s: %s", id, r.Body)
		}
		// Another org's project of the same name is its own.
		other := e.lease("globex", map[string]any{"project": "shared"})
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+other, "globex", nil)
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	})

	t.Run("exec cap", func(t *testing.T) {
		var ids []string
		for i := 0; i < 16; i++ {
			ids = append(ids, e.lease("acme", nil))
		}
		r := e.must(http.StatusTooManyRequests, "POST", "/v1/sandbox", "acme", nil)
		if r.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		// The cap is per org.
		other := e.lease("globex", nil)
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+other, "globex", nil)
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+ids[0], "acme", nil)
		ids[0] = e.lease("acme", nil)
		for _, id := range ids {
			e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
		}
	})
}

func TestFiles(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		fs := func(p string) string { return "/v1/sandbox/" + id + "/fs?path=" + url.QueryEscape(p) }

		t.Run("binary round trip", func(t *testing.T) {
			data := []byte{0x00, 0x0d, 0x0a, 0xff, 0xfe, 0x00, 'x', 0x0d}
			for i := 0; i < 256; i++ {
				data = append(data, byte(i))
			}
			r := e.must(http.StatusOK, "POST", fs("deep/er/bin.dat"), "acme", data)
			if got := r.JSON(t); got["bytes"] != float64(len(data)) || got["path"] != "/mnt/data/deep/er/bin.dat" {
				t.Errorf("write answer: %s", r.Body)
			}
			r = e.must(http.StatusOK, "GET", fs("/mnt/data/deep/er/bin.dat"), "acme", nil)
			if !bytes.Equal(r.Body, data) {
				t.Errorf("read back %x, want %x", r.Body, data)
			}
			if r.Header.Get("X-Sandbox-Kind") != "file" {
				t.Errorf("kind header: %v", r.Header)
			}
			// The program inside sees the same bytes.
			if sum := e.sh("acme", id, "od -An -tx1 deep/er/bin.dat | head -1"); !strings.HasPrefix(strings.TrimSpace(sum), "00 0d 0a ff fe 00") {
				t.Errorf("inside: %q", sum)
			}
			// An empty file round-trips too.
			e.must(http.StatusOK, "POST", fs("empty"), "acme", []byte{})
			if r := e.must(http.StatusOK, "GET", fs("empty"), "acme", nil); len(r.Body) != 0 {
				t.Errorf("empty file read %q", r.Body)
			}
		})

		t.Run("directory listing", func(t *testing.T) {
			e.must(http.StatusOK, "POST", fs("dir/a.txt"), "acme", "a")
			e.must(http.StatusOK, "POST", fs("dir/sub/b.txt"), "acme", "b")
			r := e.must(http.StatusOK, "GET", fs("dir"), "acme", nil)
			if string(r.Body) != "a.txt\nsub/\n" || r.Header.Get("X-Sandbox-Kind") != "directory" {
				t.Errorf("listing %q kind %q", r.Body, r.Header.Get("X-Sandbox-Kind"))
			}
			root := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs", "acme", nil)
			if !strings.Contains(string(root.Body), "dir/\n") {
				t.Errorf("root listing %q", root.Body)
			}
			// A file whose bytes look like a listing is still a file.
			e.must(http.StatusOK, "POST", fs("looks-like-dir"), "acme", "a.txt\nsub/\n")
			if r := e.must(http.StatusOK, "GET", fs("looks-like-dir"), "acme", nil); r.Header.Get("X-Sandbox-Kind") != "file" {
				t.Error("file taken for a directory")
			}
			e.must(http.StatusNotFound, "GET", fs("nope.txt"), "acme", nil)
			e.must(http.StatusConflict, "POST", fs("dir"), "acme", "overwrite a directory")
		})

		t.Run("confinement", func(t *testing.T) {
			for _, p := range []string{"..", "../etc/passwd", "a/../../etc/passwd", "a/..", "/etc/passwd", "/mnt/database", "/mnt", "/", "x\x00y", "/mnt/data/../data/x"} {
				if r := e.do("GET", fs(p), "acme", nil); r.Status != http.StatusBadRequest {
					t.Errorf("read %q: %d, want 400: %s", p, r.Status, r.Body)
				}
				if r := e.do("POST", fs(p), "acme", "x"); r.Status != http.StatusBadRequest {
					t.Errorf("write %q: %d, want 400: %s", p, r.Status, r.Body)
				}
				if r := e.do("POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"argv": []string{"true"}, "dir": p}); r.Status != http.StatusBadRequest {
					t.Errorf("exec dir %q: %d, want 400", p, r.Status)
				}
			}
			// Nothing was written outside the workdir.
			if out := e.exec("acme", id, map[string]any{"command": "ls /mnt; test ! -e /mnt/database"}); out.ExitCode != 0 {
				t.Errorf("a refused write landed: %+v", out)
			}
		})
	})
}

func TestCrossOrgIsNotFound(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"project": "secret"})
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=s.txt", "acme", "acme's secret")
		unknown := "sb_" + strings.Repeat("a", 26)
		for _, org := range []string{"globex", "system"} { // the operator org is a tenant here too
			for _, prefix := range []string{"/v1/sandbox/", "/v1/sandboxes/"} {
				for _, rt := range []struct {
					method, path string
					body         any
				}{
					{"GET", "", nil},
					{"POST", "/renew", map[string]any{"ttlSec": 60}},
					{"POST", "/exec", map[string]any{"argv": []string{"true"}}},
					{"POST", "/stop", nil},
					{"GET", "/fs?path=s.txt", nil},
					{"POST", "/fs?path=s.txt", "overwritten"},
					{"DELETE", "?purge=1", nil},
				} {
					foreign := e.do(rt.method, prefix+id+rt.path, org, rt.body)
					missing := e.do(rt.method, prefix+unknown+rt.path, org, rt.body)
					if foreign.Status != http.StatusNotFound || !bytes.Equal(foreign.Body, missing.Body) {
						t.Errorf("%s %s as %s: %d %s; unknown id: %d %s", rt.method, rt.path, org, foreign.Status, foreign.Body, missing.Status, missing.Body)
					}
				}
			}
			var l struct{ Sandboxes []map[string]any }
			json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox", org, nil).Body, &l)
			if len(l.Sandboxes) != 0 {
				t.Errorf("%s lists acme's sandboxes: %v", org, l.Sandboxes)
			}
		}
		// acme's sandbox and file are untouched.
		if r := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=s.txt", "acme", nil); string(r.Body) != "acme's secret" {
			t.Errorf("file changed: %q", r.Body)
		}
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	})
}

func TestVolumeKeptOnEndDroppedOnPurge(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnv(t, "dev")
	id := e.lease("acme", map[string]any{"class": "dev", "project": "site"})
	sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t)
	if sb["workdir"] != "/work" || sb["project"] != "site" {
		t.Errorf("dev sandbox: %v", sb)
	}
	// The dev toolchain is there.
	e.sh("acme", id, "git --version && tmux -V && zsh --version && make --version >/dev/null && python3 --version")
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=notes/todo.txt", "acme", "keep me")
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)

	id = e.lease("acme", map[string]any{"class": "dev", "project": "site"})
	if r := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=notes/todo.txt", "acme", nil); string(r.Body) != "keep me" {
		t.Errorf("volume lost on end: %q", r.Body)
	}
	// Another org's project of the same name is another volume.
	other := e.lease("globex", map[string]any{"class": "dev", "project": "site"})
	e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+other+"/fs?path=notes/todo.txt", "globex", nil)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+other+"?purge=1", "globex", nil)

	r := e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"?purge=1", "acme", nil)
	if r.JSON(t)["purged"] != true {
		t.Errorf("purge answer: %s", r.Body)
	}
	id = e.lease("acme", map[string]any{"class": "dev", "project": "site"})
	e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs?path=notes/todo.txt", "acme", nil)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"?purge=1", "acme", nil)

	// The project volume is a filesystem of its own, bounded (10 GiB for
	// dev), not a directory of the host's disk.
	id = e.lease("acme", map[string]any{"class": "dev", "project": "sized"})
	if df := e.sh("acme", id, "df -k --output=size /work | tail -1"); strings.TrimSpace(df) == "" || parseKB(t, df) > 11<<20 {
		t.Errorf("dev volume size %s KiB, want about 10 GiB", strings.TrimSpace(df))
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"?purge=1", "acme", nil)

	// A scratch workdir lives inside the sandbox (a bounded tmpfs) and dies
	// with it; the host keeps nothing of it.
	id = e.lease("acme", nil)
	if df := e.sh("acme", id, "df -k --output=fstype,size /mnt/data | tail -1"); !strings.HasPrefix(strings.TrimSpace(df), "tmpfs") || parseKB(t, strings.Fields(df)[1]) > 513<<10 {
		t.Errorf("exec scratch: %q, want a tmpfs of 512 MiB", df)
	}
	before, _ := os.ReadDir(filepath.Join(e.data, "runtime", "volumes"))
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=tmp.txt", "acme", "gone soon")
	after, _ := os.ReadDir(filepath.Join(e.data, "runtime", "volumes"))
	if len(after) != len(before) {
		t.Errorf("a scratch write created host volume entries: %v -> %v", before, after)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
}

func parseKB(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// TestBrokenChannelIs502: a sandbox killed behind the server's back answers
// 502 saying it died; it is then put to sleep (files kept) and the next call
// starts it again.
func TestBrokenChannelIs502(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"project": "crashy"})
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=kept.txt", "acme", "kept")
	objs, err := e.srv.Runtime.List(t.Context(), nil)
	if err != nil || len(objs) != 1 {
		t.Fatalf("runtime objects: %v %v", objs, err)
	}
	killContainer(t, e, objs[0].Name)
	r := e.must(http.StatusBadGateway, "POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"argv": []string{"true"}})
	if msg := r.JSON(t)["error"].(string); !strings.Contains(msg, "died") {
		t.Errorf("502 message: %q", msg)
	}
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "sleeping" {
		t.Errorf("after the 502: %v", sb)
	}
	fr := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=kept.txt", "acme", nil)
	if string(fr.Body) != "kept" || fr.Header.Get("X-Sandbox-Woken") != "1" {
		t.Errorf("the next call: %q %v", fr.Body, fr.Header)
	}
	// The same for a file operation.
	objs = mustList(t, e)
	killContainer(t, e, objs[0].Name)
	e.must(http.StatusBadGateway, "POST", "/v1/sandbox/"+id+"/fs?path=x", "acme", "x")
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id+"?purge=1", "acme", nil)
}

func TestUnknownRoute(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/v2/whatever", "acme", nil)
	if r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), "no such route") {
		t.Errorf("%d %s", r.Status, r.Body)
	}
}

func TestReaperEndsExpiredLeases(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", map[string]any{"ttlSec": 1})
	keep := e.lease("acme", map[string]any{"ttlSec": 600})
	time.Sleep(1100 * time.Millisecond)
	e.srv.Reaper.Once(t.Context())
	e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id, "acme", nil)
	e.must(http.StatusOK, "GET", "/v1/sandbox/"+keep, "acme", nil)
	objs, err := e.srv.Runtime.List(t.Context(), nil)
	if err != nil || len(objs) != 1 {
		t.Errorf("runtime objects after reaping: %v %v", objs, err)
	}
	e.sh("acme", keep, "true")
}

// TestStartFailureIs503 gives the real runsc an image it cannot boot (a
// complete manifest over an empty rootfs: no program to run).
func TestStartFailureIs503(t *testing.T) {
	images := t.TempDir()
	if err := os.MkdirAll(filepath.Join(images, "exec", "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(imagesDir(), "exec", "image.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(images, "exec", "image.json"), manifest, 0o644)
	e := newEnvImages(t, images)

	r := e.must(http.StatusServiceUnavailable, "POST", "/v1/sandbox", "acme", nil)
	msg := r.JSON(t)["error"].(string)
	if !strings.Contains(msg, "could not be started") {
		t.Errorf("503 message: %q", msg)
	}
	var l struct{ Sandboxes []map[string]any }
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox?status=error", "acme", nil).Body, &l)
	if len(l.Sandboxes) != 1 || l.Sandboxes[0]["error"] == "" || !strings.Contains(msg, l.Sandboxes[0]["id"].(string)) {
		t.Fatalf("the failed lease is not kept as an error row named in the answer: %v / %q", l.Sandboxes, msg)
	}
	// A sandbox that does not run gets no terminal: 409, no ticket.
	e.must(http.StatusConflict, "POST", "/v1/sandbox/"+l.Sandboxes[0]["id"].(string)+"/terminal/ticket", "acme", nil)
	// Nothing of the container is left, and the error row does not hold
	// the exec cap or a project.
	if objs, err := e.srv.Runtime.List(t.Context(), nil); err != nil || len(objs) != 0 {
		t.Errorf("a failed start left runtime objects: %v %v", objs, err)
	}
	// The reaper ends error rows.
	e.srv.Reaper.Once(t.Context())
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).Body, &l)
	if len(l.Sandboxes) != 0 {
		t.Errorf("error row survived the reaper: %v", l.Sandboxes)
	}
}

// TestRestartKeepsSandboxes starts a second server on the same data
// directory: rows, containers and files are all found again.
func TestRestartKeepsSandboxes(t *testing.T) {
	e := newEnv(t)
	id := e.lease("acme", nil)
	e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=state.txt", "acme", "before restart")
	e.restart(t)
	if r := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=state.txt", "acme", nil); string(r.Body) != "before restart" {
		t.Errorf("file after restart: %q", r.Body)
	}
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "running" {
		t.Errorf("row after restart: %v", sb)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
}

func TestStopCancelsWorkNotTheSandbox(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs?path=log.txt", "acme", "before\n")
		results := make(chan execAnswer, 2)
		for i := 0; i < 2; i++ {
			go func() {
				r := e.do("POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"command": "echo working >> log.txt; sleep 300 | cat", "timeoutSec": 600})
				var a execAnswer
				json.Unmarshal(r.Body, &a)
				results <- a
			}()
		}
		// Wait until both commands run inside.
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(e.sh("acme", id, "ps -eo args"), "sleep 300") || strings.Count(e.sh("acme", id, "cat log.txt"), "working") < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the commands did not start")
			}
			time.Sleep(100 * time.Millisecond)
		}
		e.sh("acme", id, "setsid sleep 500 </dev/null >/dev/null 2>&1 &")
		r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/stop", "acme", nil)
		if n := r.JSON(t)["stopped"]; n != float64(2) {
			t.Errorf("stop answered %v commands, want 2: %s", n, r.Body)
		}
		for i := 0; i < 2; i++ {
			select {
			case a := <-results:
				if a.ExitCode != 137 || !strings.Contains(a.Stderr, "stopped") {
					t.Errorf("stopped command answered %+v", a)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a stopped command did not return")
			}
		}
		// The processes died inside; the sandbox and its files stay.
		if ps := e.sh("acme", id, "ps -eo args"); strings.Contains(ps, "sleep 300") || strings.Contains(ps, "sleep 500") {
			t.Errorf("stopped processes survive:\n%s", ps)
		}
		if r := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=log.txt", "acme", nil); string(r.Body) != "before\nworking\nworking\n" {
			t.Errorf("files after stop: %q", r.Body)
		}
		if n := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/stop", "acme", nil).JSON(t)["stopped"]; n != float64(0) {
			t.Errorf("second stop: %v", n)
		}
		e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+id+"/stop", "globex", nil)
	})
}

func TestMeterUsageAndMetrics(t *testing.T) {
	t.Parallel() // see parallel_test.go
	// Fees as --fee exec=3 gives them: exec costs 3 cents, dev is free.
	e := newEnvConfig(t, server.Config{Meter: meter.Config{Fees: meter.Fees{ByClass: map[string]int64{"exec": 3}}}}, "dev")

	// No balance: refused with 402, nothing created.
	r := e.must(http.StatusPaymentRequired, "POST", "/v1/sandbox", "acme", nil)
	if !strings.Contains(string(r.Body), "3 cents") {
		t.Errorf("402 message: %s", r.Body)
	}
	var l struct{ Sandboxes []map[string]any }
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).Body, &l)
	if len(l.Sandboxes) != 0 {
		t.Fatalf("a refused lease left rows: %v", l.Sandboxes)
	}
	// A free class still leases; a funded org is debited once per lease,
	// and refunded when a later check refuses.
	dev := e.lease("acme", map[string]any{"class": "dev", "project": "p"})
	if bal, _ := e.srv.Store.Credit(t.Context(), "acme", 7); bal != 7 {
		t.Fatalf("balance %d", bal)
	}
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox", "acme", map[string]any{"runtime": "kata-clh"}) // refused after the gate
	id := e.lease("acme", nil)
	if bal, _ := e.srv.Store.Credit(t.Context(), "acme", 0); bal != 4 {
		t.Errorf("balance after one paid lease and one refusal: %d, want 4", bal)
	}

	e.sh("acme", id, "true")
	time.Sleep(1100 * time.Millisecond)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	var u struct {
		Usage []struct {
			Class        string
			Leases       int
			LeaseSeconds float64
		}
	}
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/usage", "acme", nil).Body, &u)
	got := map[string]float64{}
	for _, row := range u.Usage {
		got[row.Class] = row.LeaseSeconds
		if row.Leases != 1 {
			t.Errorf("%s leases: %d", row.Class, row.Leases)
		}
	}
	if got["exec"] < 1 || got["dev"] < 1 || len(u.Usage) != 2 {
		t.Errorf("usage: %+v", u.Usage)
	}
	// Usage is per org.
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandboxes/usage", "globex", nil).Body, &u)
	if len(u.Usage) != 0 {
		t.Errorf("globex sees usage: %+v", u.Usage)
	}

	// Metrics: the operator org only.
	e.must(http.StatusForbidden, "GET", "/metrics", "acme", nil)
	e.must(http.StatusUnauthorized, "GET", "/metrics", "", nil)
	m := string(e.must(http.StatusOK, "GET", "/metrics", "system", nil).Body)
	for _, want := range []string{`sandbox_leases_total{class="exec",outcome="refused"} 2`, `sandbox_leases_total{class="exec",outcome="created"} 1`, `sandbox_live{class="dev"} 1`, `sandbox_live{class="exec"} 0`, `sandbox_exec_seconds_count{op="exec"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+dev, "acme", nil)
}

func TestSleepAndWake(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", map[string]any{"project": "nap"})
		e.sh("acme", id, "echo in-volume > v.txt; echo in-overlay > /home/user/o.txt; echo in-tmp > /tmp/t.txt")

		// Where the backend checkpoints, the memory, the root's overlay and
		// /tmp come back; elsewhere the volume only, and the answer says so.
		kept := e.has(runtime.CapCheckpoint)
		r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil).JSON(t)
		if r["status"] != "sleeping" || r["memoryKept"] != kept {
			t.Fatalf("pause: %v", r)
		}
		if objs, err := e.srv.Runtime.List(t.Context(), nil); err != nil {
			t.Fatalf("listing: %v", err)
		} else if len(objs) != 0 {
			t.Errorf("a sleeping sandbox keeps a container: %v", objs)
		}
		// It still holds its project, and pausing again is a no-op.
		e.must(http.StatusConflict, "POST", "/v1/sandbox", "acme", map[string]any{"project": "nap"})
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)

		// Any use wakes it transparently, and says so.
		var out execAnswer
		res := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"command": "cat v.txt /home/user/o.txt /tmp/t.txt 2>/dev/null"})
		json.Unmarshal(res.Body, &out)
		want := "in-volume\n"
		if kept {
			want += "in-overlay\nin-tmp\n"
		}
		if out.Stdout != want || !strings.Contains(string(res.Body), `"woken":true`) {
			t.Errorf("exec on a sleeping sandbox: %s", res.Body)
		}
		if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["status"] != "running" {
			t.Errorf("after wake: %v", sb)
		}

		// fs and renew wake it too; resume wakes it now.
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		fr := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs?path=v.txt", "acme", nil)
		if string(fr.Body) != "in-volume\n" || fr.Header.Get("X-Sandbox-Woken") != "1" {
			t.Errorf("fs read on a sleeping sandbox: %q %v", fr.Body, fr.Header)
		}
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		if sb := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/renew", "acme", map[string]any{"ttlSec": 300}).JSON(t); sb["woken"] != true || sb["status"] != "running" {
			t.Errorf("renew on a sleeping sandbox: %v", sb)
		}
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		if sb := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/resume", "acme", nil).JSON(t); sb["woken"] != true {
			t.Errorf("resume: %v", sb)
		}
		if sb := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/resume", "acme", nil).JSON(t); sb["woken"] == true {
			t.Errorf("resume of a running sandbox says woken: %v", sb)
		}

		// Concurrent uses of a sleeping sandbox wake it once.
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		errs := make(chan string, 4)
		for i := 0; i < 4; i++ {
			go func() {
				r := e.do("POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"command": "cat v.txt"})
				errs <- fmt.Sprint(r.Status, " ", string(r.Body))
			}()
		}
		for i := 0; i < 4; i++ {
			if got := <-errs; !strings.HasPrefix(got, "200") || !strings.Contains(got, "in-volume") {
				t.Errorf("concurrent wake: %s", got)
			}
		}
		if objs, err := e.srv.Runtime.List(t.Context(), nil); err != nil {
			t.Fatalf("listing: %v", err)
		} else if len(objs) != 1 {
			t.Errorf("concurrent wakes made %d containers", len(objs))
		}

		// A sleeping sandbox ends like any other; its volume is kept.
		e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/pause", "acme", nil)
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
		again := e.lease("acme", map[string]any{"project": "nap"})
		if got := e.sh("acme", again, "cat v.txt"); got != "in-volume\n" {
			t.Errorf("volume after ending a sleeping sandbox: %q", got)
		}
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+again+"?purge=1", "acme", nil)
		if cps, _ := filepath.Glob(filepath.Join(e.data, "runtime", "checkpoints", "*")); len(cps) != 0 {
			t.Errorf("checkpoints left: %v", cps)
		}
	})
}

func TestReaperSleepsIdleSandboxes(t *testing.T) {
	t.Parallel() // see parallel_test.go
	e := newEnvConfig(t, server.Config{Reaper: reaper.Config{IdleAfter: time.Second}})
	idle := e.lease("acme", nil)
	busy := e.lease("acme", nil)
	time.Sleep(1200 * time.Millisecond)
	e.sh("acme", busy, "true")
	e.srv.Reaper.Once(t.Context())
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+idle, "acme", nil).JSON(t); sb["status"] != "sleeping" {
		t.Errorf("idle sandbox: %v", sb)
	}
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+busy, "acme", nil).JSON(t); sb["status"] != "running" {
		t.Errorf("busy sandbox: %v", sb)
	}
	// A sandbox with a command in flight is not put to sleep.
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.do("POST", "/v1/sandbox/"+busy+"/exec", "acme", map[string]any{"command": "sleep 3"})
	}()
	time.Sleep(1500 * time.Millisecond)
	e.must(http.StatusConflict, "POST", "/v1/sandbox/"+busy+"/pause", "acme", nil)
	<-done
}

func TestWrongMethodIsJSON405(t *testing.T) {
	e := newEnv(t)
	r := e.do("PUT", "/v1/sandbox", "acme", nil)
	if r.Status != http.StatusMethodNotAllowed || !strings.Contains(r.Header.Get("Allow"), "POST") || r.JSON(t)["error"] == nil {
		t.Errorf("PUT /v1/sandbox: %d %v %s", r.Status, r.Header, r.Body)
	}
	r = e.do("GET", "/v1/sandbox/"+strings.Repeat("a", 5)+"/exec", "acme", nil)
	if r.Status != http.StatusMethodNotAllowed {
		t.Errorf("GET exec: %d %s", r.Status, r.Body)
	}
}

// unixTime reads a Sandbox object's time: Unix seconds, an integer on the wire.
func unixTime(t *testing.T, v any) time.Time {
	t.Helper()
	f, ok := v.(float64)
	if !ok || f != float64(int64(f)) || f < 1e9 {
		t.Fatalf("a time of the Sandbox object is %T %v, not Unix seconds", v, v)
	}
	return time.Unix(int64(f), 0)
}
