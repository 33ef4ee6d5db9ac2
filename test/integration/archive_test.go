package integration_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/server"
)

type entry struct {
	name string
	typ  byte
	mode int64
	body string
	link string
}

func makeTar(t *testing.T, entries []entry, gz bool) []byte {
	t.Helper()
	var b bytes.Buffer
	var w io.Writer = &b
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&b)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return b.Bytes()
}

// TestArchive: a tree with binary files, an empty directory, a link inside
// and modes goes in as a tar.gz and comes back as a tar, both streamed; a tar
// with '..', an absolute path, a link out (as it reads, or through the
// other links as they will be on disk), a path through a link or a device
// is refused whole, with nothing written (not even its staging directory).
func TestArchive(t *testing.T) {
	t.Parallel() // see parallel_test.go
	onBackends(t, server.Config{}, func(t *testing.T, e *env) {
		id := e.lease("acme", nil)
		bin := string([]byte{0, 255, 1, '\n', 0xc3})
		tree := []entry{
			{name: "proj/", typ: tar.TypeDir, mode: 0o755},
			{name: "proj/run.sh", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\necho ran\n"},
			{name: "proj/secret", typ: tar.TypeReg, mode: 0o600, body: bin},
			{name: "proj/empty/", typ: tar.TypeDir, mode: 0o700},
			{name: "proj/link", typ: tar.TypeSymlink, link: "run.sh"},
			{name: "proj/setuid", typ: tar.TypeReg, mode: 0o4755, body: "x"},
		}
		r := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/fs/archive?path=in", "acme", makeTar(t, tree, true)).JSON(t)
		if r["entries"] != float64(6) {
			t.Errorf("extract: %v", r)
		}
		out := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"command": "cd in && find . -printf '%p %m %y %l\\n' | sort && ./proj/link"}).JSON(t)
		want := ". 755 d \n./proj 755 d \n./proj/empty 700 d \n./proj/link 777 l run.sh\n./proj/run.sh 755 f \n./proj/secret 600 f \n./proj/setuid 755 f \nran\n"
		// A pod's workdir volume has an fsGroup, which marks its new
		// directories setgid (the group's, not the archive's doing).
		got, _ := out["stdout"].(string)
		got = regexp.MustCompile(`(?m) 2([0-7]{3}) d `).ReplaceAllString(got, " $1 d ")
		if got != want {
			t.Errorf("the tree in the sandbox:\n%v\nwant\n%s", out["stdout"], want)
		}

		// Back out as a tar: the same entries, the bytes intact.
		a := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/fs/archive?path=in/proj", "acme", nil)
		tr := tar.NewReader(bytes.NewReader(a.Body))
		var names []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, strings.TrimPrefix(h.Name, "./"))
			if h.Name == "./secret" {
				if b, _ := io.ReadAll(tr); string(b) != bin || h.Mode&0o777 != 0o600 {
					t.Errorf("secret came back as %q mode %o", b, h.Mode)
				}
			}
		}
		sort.Strings(names)
		if strings.Join(names, ",") != ",empty/,link,run.sh,secret,setuid" {
			t.Errorf("the archive's entries: %v", names)
		}
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs/archive?path=nope", "acme", nil)
		e.must(http.StatusBadRequest, "GET", "/v1/sandbox/"+id+"/fs/archive?path=in/proj/run.sh", "acme", nil)
		e.must(http.StatusNotFound, "GET", "/v1/sandbox/"+id+"/fs/archive?path=in", "globex", nil)

		for name, bad := range map[string][]entry{
			"dotdot":   {{name: "ok.txt", typ: tar.TypeReg, body: "x"}, {name: "../escape", typ: tar.TypeReg, body: "x"}},
			"absolute": {{name: "ok.txt", typ: tar.TypeReg, body: "x"}, {name: "/tmp/abs", typ: tar.TypeReg, body: "x"}},
			"link out": {{name: "ok.txt", typ: tar.TypeReg, body: "x"}, {name: "out", typ: tar.TypeSymlink, link: "../../etc"}},
			"through":  {{name: "up", typ: tar.TypeSymlink, link: "."}, {name: "up/x", typ: tar.TypeSymlink, link: ".."}},
			// Each link of these is inside as its name reads, and out once the
			// links before (or after) it are on disk.
			"through an earlier link": {{name: "sub/y", typ: tar.TypeSymlink, link: ".."}, {name: "sub/x", typ: tar.TypeSymlink, link: "y/../.."}},
			"a chain":                 {{name: "a/b/c", typ: tar.TypeSymlink, link: ".."}, {name: "a/b/d", typ: tar.TypeSymlink, link: "c/.."}, {name: "a/b/e", typ: tar.TypeSymlink, link: "d/../../.."}},
			"made a link later":       {{name: "sub/x", typ: tar.TypeSymlink, link: "y/../.."}, {name: "sub/y", typ: tar.TypeSymlink, link: ".."}},
			"a hard link to a link":   {{name: "sub/deep/l", typ: tar.TypeSymlink, link: "../.."}, {name: "top", typ: tar.TypeLink, link: "sub/deep/l"}},
			"device":                  {{name: "ok.txt", typ: tar.TypeReg, body: "x"}, {name: "dev", typ: tar.TypeChar}},
			"not a tar":               nil,
		} {
			body := makeTar(t, bad, false)
			if bad == nil {
				body = []byte(strings.Repeat("not a tar ", 100))
			}
			r := e.do("POST", "/v1/sandbox/"+id+"/fs/archive?path=refused", "acme", body)
			if r.Status != http.StatusBadRequest {
				t.Errorf("%s: %d %s", name, r.Status, r.Body)
			}
		}
		left := e.must(http.StatusOK, "POST", "/v1/sandbox/"+id+"/exec", "acme", map[string]any{"command": "ls -A; ls -A /tmp | grep -vx .sandbox-start"}).JSON(t) // a pod's start stamp (kube) is the runner's
		if left["stdout"] != "in\n" {
			t.Errorf("refused archives left: %q", left["stdout"])
		}
	})
}
