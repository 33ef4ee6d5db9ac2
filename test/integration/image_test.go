package integration_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// tarEntry is one entry of a test layer.
type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       []byte
	size       int64 // a header claiming more than body (a truncated layer)
}

func tarLayer(t testing.TB, entries ...tarEntry) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Uid: 1000, Gid: 1000}
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.size > 0 {
			h.Size = e.size
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		w.Write(e.body)
	}
	if entries[len(entries)-1].size == 0 {
		w.Close()
	} else {
		w.Flush() // the truncated layer ends here, mid-entry
	}
	raw := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// busyboxLayer is a tiny userland: the host's static busybox as /bin/sh
// and a few applets.
func busyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		testenv.Missing(t, testenv.RegistryPart, "/bin/busybox (Debian's busybox-static; scripts/deps.sh installs it for the tests)")
	}
	es := []tarEntry{{name: "bin/", typ: tar.TypeDir}, {name: "bin/busybox", typ: tar.TypeReg, body: bb}, {name: "tmp/", typ: tar.TypeDir, mode: 0o1777}}
	for _, applet := range []string{"sh", "ls", "cat", "echo", "id", "env", "stat", "sleep"} {
		es = append(es, tarEntry{name: "bin/" + applet, typ: tar.TypeSymlink, link: "busybox"})
	}
	return tarLayer(t, es...)
}

// push writes an image of layers (and env) to the registry as repo:tag.
func push(t testing.TB, reg *testenv.Registry, repo string, env []string, layers ...v1.Layer) string {
	t.Helper()
	return pushWith(t, reg, repo, func(c *v1.Config) { c.Env = env }, layers...)
}

// pushWith is push with the image config set by set.
func pushWith(t testing.TB, reg *testenv.Registry, repo string, set func(*v1.Config), layers ...v1.Layer) string {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	set(&cfg.Config)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	return reg.Push(t, repo, img)
}

// imagesWithClasses is an images directory of its own (pulled images land
// there) holding the built class images by symlink.
func imagesWithClasses(t testing.TB) string {
	dir := t.TempDir()
	for _, c := range []string{"exec", "dev"} {
		if err := os.Symlink(filepath.Join(testenv.Images(), c), filepath.Join(dir, c)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// treeOf lists a rootfs: path → type and mode.
func treeOf(t *testing.T, root string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		st, _ := os.Lstat(p)
		rel, _ := filepath.Rel(root, p)
		out[rel] = st.Mode().String()
		return nil
	})
	return out
}

// TestImagesOnRunsc: images pulled from a real registry on loopback are
// unpacked exactly as their layers say, hostile ones are refused or
// defanged with nothing escaping, and a lease runs on a pulled image with
// its environment.
func TestImagesOnRunsc(t *testing.T) {
	reg := testenv.NeedRegistry(t, false)
	images := imagesWithClasses(t)
	cfg := server.Config{Images: images}
	cfg.Catalog.Allow = []string{reg.Host}
	e := newEnvConfig(t, cfg)

	tool := push(t, reg, "team/tool:1", []string{"GREETING=hello from the image", "PATH=/bin"},
		busyboxLayer(t),
		tarLayer(t,
			tarEntry{name: "app/", typ: tar.TypeDir},
			tarEntry{name: "app/hello.sh", typ: tar.TypeReg, body: []byte("echo \"$GREETING\"; id -u\n")},
			tarEntry{name: "app/old", typ: tar.TypeReg, body: []byte("old")},
			tarEntry{name: "app/setuid", typ: tar.TypeReg, mode: 0o4755, body: []byte("x")},
			tarEntry{name: "dev/", typ: tar.TypeDir},
			tarEntry{name: "dev/evil", typ: tar.TypeChar},
			tarEntry{name: "etc/", typ: tar.TypeDir},
			tarEntry{name: "etc/shadow-link", typ: tar.TypeSymlink, link: "/etc/shadow"}),
		tarLayer(t,
			tarEntry{name: "app/.wh.old", typ: tar.TypeReg},
			tarEntry{name: "etc/shadow-link", typ: tar.TypeReg, body: []byte("replaced, not written through")}))
	shadow, _ := os.ReadFile("/etc/shadow")

	r := e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "tool", "ref": tool})
	digest, _ := r.JSON(t)["digest"].(string)
	if !strings.HasPrefix(digest, "sha256:") || r.JSON(t)["scope"] != "org" {
		t.Fatalf("pull answer: %s", r.Body)
	}
	// The rootfs is exactly what the layers say, defanged.
	root := filepath.Join(images, "oci", strings.TrimPrefix(digest, "sha256:"), "rootfs")
	tree := treeOf(t, root)
	want := []string{"app", "app/hello.sh", "app/setuid", "bin", "bin/busybox", "dev", "etc", "etc/shadow-link", "tmp"}
	for _, a := range []string{"sh", "ls", "cat", "echo", "id", "env", "stat", "sleep"} {
		want = append(want, "bin/"+a)
	}
	var got []string
	for p := range tree {
		got = append(got, p)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rootfs:\n got %v\nwant %v", got, want)
	}
	if m := tree["app/setuid"]; m != "-rwxr-xr-x" {
		t.Errorf("the setuid file is %s", m)
	}
	if m := tree["tmp"]; m != "dtrwxrwxrwx" {
		t.Errorf("/tmp is %s", m)
	}
	if m := tree["etc/shadow-link"]; !strings.HasPrefix(m, "-") {
		t.Errorf("etc/shadow-link is %s", m)
	}
	if now, _ := os.ReadFile("/etc/shadow"); !bytes.Equal(now, shadow) {
		t.Fatal("the host's /etc/shadow changed")
	}

	// Leased and run, with the image's environment.
	id := e.lease("acme", map[string]any{"image": "tool"})
	if sb := e.must(http.StatusOK, "GET", "/v1/sandbox/"+id, "acme", nil).JSON(t); sb["image"] != digest {
		t.Errorf("the row's image: %v, want the digest %s", sb["image"], digest)
	}
	if a := e.exec("acme", id, map[string]any{"command": "sh /app/hello.sh"}); a.ExitCode != 0 || a.Stdout != "hello from the image\n1000\n" {
		t.Errorf("the image's program: %+v", a)
	}
	// The same digest under another name costs nothing; a name of the
	// other org is not this org's.
	again := e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "tool-again", "ref": tool}).JSON(t)
	if again["digest"] != digest {
		t.Errorf("the second pull: %v", again)
	}
	if dirs, _ := filepath.Glob(filepath.Join(images, "oci", "*")); len(dirs) != 1 {
		t.Errorf("unpacked images: %v", dirs)
	}
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox", "globex", map[string]any{"image": "tool"})
	if list := ownImages(e.must(http.StatusOK, "GET", "/v1/images", "globex", nil).JSON(t)["images"].([]any)); len(list) != 0 {
		t.Errorf("globex sees %v", list)
	}
	// In use: not deleted; after the end it is.
	e.must(http.StatusConflict, "DELETE", "/v1/images/tool", "acme", nil)
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	e.must(http.StatusOK, "DELETE", "/v1/images/tool", "acme", nil)
	e.must(http.StatusNotFound, "DELETE", "/v1/images/tool", "acme", nil)

	// Refused: a registry the operator does not allow, an image without a
	// shell for the class, layers that leave the rootfs.
	e.must(http.StatusForbidden, "POST", "/v1/images", "acme", map[string]string{"name": "x", "ref": "127.0.0.2:1/x:1"})
	noshell := push(t, reg, "team/noshell:1", nil, tarLayer(t, tarEntry{name: "data", typ: tar.TypeReg, body: []byte("d")}))
	// Pulled with progress: a line per layer, then the image.
	req, _ := http.NewRequest("POST", e.http.URL+"/v1/images", strings.NewReader(`{"name":"noshell","ref":"`+noshell+`"}`))
	req.Header.Set("Authorization", "Bearer "+e.keys["acme"])
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || !strings.HasPrefix(string(lines), `{"layer":1,"layers":1,"bytes":1}`+"\n") || !strings.Contains(string(lines), `"image":{"name":"noshell"`) {
		t.Errorf("a streamed pull: %d %s", res.StatusCode, lines)
	}
	if msg := e.must(http.StatusBadRequest, "POST", "/v1/sandbox", "acme", map[string]any{"image": "noshell"}).JSON(t)["error"].(string); !strings.Contains(msg, "/bin/sh") {
		t.Errorf("lease of an image without a shell: %s", msg)
	}
	hostile := map[string][]tarEntry{
		"dotdot":      {{name: "../../escaped", typ: tar.TypeReg, body: []byte("x")}},
		"symlink-out": {{name: "out", typ: tar.TypeSymlink, link: "/"}, {name: "out/tmp/escaped", typ: tar.TypeReg, body: []byte("x")}},
		"hardlink":    {{name: "h", typ: tar.TypeLink, link: "../../../etc/shadow"}},
	}
	for tag, es := range hostile {
		ref := push(t, reg, "team/hostile:"+tag, nil, busyboxLayer(t), tarLayer(t, es...))
		if r := e.do("POST", "/v1/images", "acme", map[string]string{"name": "h-" + tag, "ref": ref}); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", tag, r.Status, r.Body)
		}
	}
	// A whiteout of / hides every lower layer, and nothing beyond the
	// rootfs: what is left is the upper layer alone.
	wipe := push(t, reg, "team/wipe:1", nil, busyboxLayer(t),
		tarLayer(t, tarEntry{name: ".wh..wh..opq", typ: tar.TypeReg}, tarEntry{name: "only/", typ: tar.TypeDir}, tarEntry{name: "only/file", typ: tar.TypeReg, body: []byte("o")}))
	wd := e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "wipe", "ref": wipe}).JSON(t)["digest"].(string)
	if tree := treeOf(t, filepath.Join(images, "oci", strings.TrimPrefix(wd, "sha256:"), "rootfs")); len(tree) != 2 || tree["only/file"] == "" {
		t.Errorf("after a whiteout of /: %v", tree)
	}
	if _, err := os.Stat(filepath.Join(images, "exec")); err != nil {
		t.Errorf("beside the rootfs: %v", err)
	}
	if _, err := os.Stat("/tmp/escaped"); err == nil {
		t.Error("a layer wrote /tmp/escaped")
	}
	if staging, _ := filepath.Glob(filepath.Join(images, "oci", ".pull-*")); len(staging) != 0 {
		t.Errorf("half-pulled images left: %v", staging)
	}

	// Over the disk quota: a 10 GiB file (its header says so) is refused
	// before it is written.
	small := int64(64)
	if err := e.srv.Store.SetOrgQuota(t.Context(), "acme", quota.Policy{DiskMiB: &small}); err != nil {
		t.Fatal(err)
	}
	big := push(t, reg, "team/big:1", nil, tarLayer(t, tarEntry{name: "big", typ: tar.TypeReg, body: make([]byte, 1<<20), size: 10 << 30}))
	if r := e.do("POST", "/v1/images", "acme", map[string]string{"name": "big", "ref": big}); r.Status != http.StatusForbidden || !strings.Contains(string(r.Body), "quota") {
		t.Errorf("a 10 GiB image under a 64 MiB quota: %d %s", r.Status, r.Body)
	}
}

// TestImagePullWithAuth: a registry with basic auth; the credentials work
// for the pull and are kept nowhere.
func TestImagePullWithAuth(t *testing.T) {
	reg := testenv.NeedRegistry(t, true)
	images := imagesWithClasses(t)
	cfg := server.Config{Images: images}
	cfg.Catalog.Allow = []string{reg.Host + "/team"}
	e := newEnvConfig(t, cfg)
	ref := push(t, reg, "team/private:1", nil, busyboxLayer(t))
	e.must(http.StatusBadRequest, "POST", "/v1/images", "acme", map[string]string{"name": "p", "ref": ref})
	e.must(http.StatusBadRequest, "POST", "/v1/images", "acme", catalog.ImageRequest{Name: "p", Ref: ref, Username: reg.User, Password: "wrong"})
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", catalog.ImageRequest{Name: "p", Ref: ref, Username: reg.User, Password: reg.Password})
	// Nothing of the password is on disk.
	filepath.WalkDir(e.data, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(reg.Password)) {
				t.Errorf("%s holds the registry password", p)
			}
		}
		return nil
	})
	id := e.lease("acme", map[string]any{"image": "p"})
	if out := e.sh("acme", id, "ls /bin/busybox"); out != "/bin/busybox\n" {
		t.Errorf("in the private image: %q", out)
	}
}

// TestSnapshotOnRunsc: "install once, start from there" — a sandbox's
// installs (files under site-packages, a deletion) and its workdir saved
// as an image of the org, leased again, and used by an interpreter
// session.
func TestSnapshotOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	images := imagesWithClasses(t)
	e := newEnvConfig(t, server.Config{Images: images})
	id := e.lease("acme", nil)
	site := "$(python3 -c 'import site; print(site.getusersitepackages())')"
	e.sh("acme", id, "mkdir -p "+site+"/fakepkg && echo 'VALUE = 42' > "+site+"/fakepkg/__init__.py && mkdir -p ~/.cache && echo gone > ~/.cache/x && echo data > notes.txt")
	e.sh("acme", id, "rm ~/.cache/x")
	r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": "withpkg", "workdir": true}).JSON(t)
	if r["scope"] != "org" || !strings.HasPrefix(r["digest"].(string), "sha256:") {
		t.Fatalf("snapshot: %v", r)
	}
	// The sandbox's credential is not in the image: it would start every
	// sandbox of it with this one's.
	tok := e.credentialIn("acme", id)
	sig := signature(tok)
	filepath.WalkDir(images, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, "/run/sandbox") {
			t.Errorf("the image holds the credential's directory: %s", p)
		}
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(sig)) {
				t.Errorf("%s holds the sandbox's credential", p)
			}
		}
		return nil
	})
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)

	again := e.lease("acme", map[string]any{"image": "withpkg"})
	if c := e.verifyPublished(e.credentialIn("acme", again)); c.Sandbox != again {
		t.Errorf("a lease of the template holds the credential of %s", c.Sandbox)
	}
	if out := e.sh("acme", again, "python3 -c 'import fakepkg; print(fakepkg.VALUE)'; cat notes.txt; ls ~/.cache"); out != "42\ndata\n" {
		t.Errorf("a lease of the template: %q", out)
	}
	// An interpreter session on it.
	if a := e.code("acme", map[string]any{"language": "py", "image": "withpkg", "code": "import fakepkg\nprint(fakepkg.VALUE + 1)"}); a.Stdout != "43\n" {
		t.Errorf("a session on the template: %+v", a)
	}
	// Another org has no such image; the org's list has it.
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox", "globex", map[string]any{"image": "withpkg"})
	e.must(http.StatusNotFound, "POST", "/v1/sandbox/"+again+"/snapshot", "globex", map[string]any{"name": "stolen"})
	if list := ownImages(e.must(http.StatusOK, "GET", "/v1/images", "acme", nil).JSON(t)["images"].([]any)); len(list) != 1 {
		t.Errorf("images: %v", list)
	}
}

// TestImageUserOnRunsc: the image config's User is who its programs run
// as, found in the image's own /etc/passwd; root is refused.
func TestImageUserOnRunsc(t *testing.T) {
	reg := testenv.NeedRegistry(t, false)
	cfg := server.Config{Images: imagesWithClasses(t)}
	cfg.Catalog.Allow = []string{reg.Host}
	e := newEnvConfig(t, cfg)
	passwd := tarLayer(t, tarEntry{name: "etc/", typ: tar.TypeDir}, tarEntry{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644,
		body: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345:app:/home/app:/bin/sh\n")})
	for user, want := range map[string]string{"app": "1234 2345\n", "4321:99": "4321 99\n", "": "1000 1000\n"} {
		ref := pushWith(t, reg, "team/user:"+map[string]string{"app": "app", "4321:99": "num", "": "none"}[user], func(c *v1.Config) { c.User = user }, busyboxLayer(t), passwd)
		name := "u-" + map[string]string{"app": "app", "4321:99": "num", "": "none"}[user]
		e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": name, "ref": ref})
		id := e.lease("acme", map[string]any{"image": name})
		if out := e.sh("acme", id, "echo $(id -u) $(id -g)"); out != want {
			t.Errorf("user %q: %q, want %q", user, out, want)
		}
		e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
	}
	for _, root := range []string{"root", "0", "0:0"} {
		ref := pushWith(t, reg, "team/root:1", func(c *v1.Config) { c.User = root }, busyboxLayer(t), passwd)
		e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "r", "ref": ref})
		if msg := e.must(http.StatusBadRequest, "POST", "/v1/sandbox", "acme", map[string]any{"image": "r"}).JSON(t)["error"].(string); !strings.Contains(msg, "root") {
			t.Errorf("user %q: %s", root, msg)
		}
		e.must(http.StatusOK, "DELETE", "/v1/images/r", "acme", nil)
	}
}

// TestImageRunOnRunsc: a lease with "run" starts the image's own command
// (Entrypoint + Cmd, in its WorkingDir) as a background process; an image
// without one is refused before anything is leased.
func TestImageRunOnRunsc(t *testing.T) {
	reg := testenv.NeedRegistry(t, false)
	cfg := server.Config{Images: imagesWithClasses(t)}
	cfg.Catalog.Allow = []string{reg.Host}
	e := newEnvConfig(t, cfg)
	app := tarLayer(t, tarEntry{name: "srv/", typ: tar.TypeDir}, tarEntry{name: "srv/serve.sh", typ: tar.TypeReg, body: []byte("pwd; echo \"args: $*\"; sleep 600\n")})
	ref := pushWith(t, reg, "team/server:1", func(c *v1.Config) {
		c.Env, c.Entrypoint, c.Cmd, c.WorkingDir = []string{"PATH=/bin"}, []string{"/bin/sh", "/srv/serve.sh"}, []string{"--port", "8000"}, "/srv"
	}, busyboxLayer(t), app)
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "server", "ref": ref})
	id := e.lease("acme", map[string]any{"image": "server", "run": true})
	var list struct {
		Processes []struct {
			Pid    int
			Argv   []string
			Dir    string
			Status string
		}
	}
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/sandbox/"+id+"/processes", "acme", nil).Body, &list)
	if len(list.Processes) != 1 || list.Processes[0].Dir != "/srv" || strings.Join(list.Processes[0].Argv, " ") != "/bin/sh /srv/serve.sh --port 8000" {
		t.Fatalf("processes after a lease with run: %+v", list)
	}
	pid := list.Processes[0].Pid
	for range 50 {
		if e.process("acme", id, pid).OutputBytes >= 22 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := e.lastOutput("acme", id, pid); n != "/srv\nargs: --port 8000\n" {
		t.Errorf("the image's command said %q", n)
	}
	plain := push(t, reg, "team/plain:1", nil, busyboxLayer(t))
	e.must(http.StatusCreated, "POST", "/v1/images", "acme", map[string]string{"name": "plain", "ref": plain})
	e.must(http.StatusBadRequest, "POST", "/v1/sandbox", "acme", map[string]any{"image": "plain", "run": true})
	if list := e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).JSON(t)["sandboxes"].([]any); len(list) != 1 {
		t.Errorf("a refused run leased something: %v", list)
	}
}

// lastOutput is a process's kept output, at once.
func (e *env) lastOutput(org, id string, pid int) string {
	e.t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/sandbox/%s/processes/%d/output", e.http.URL, id, pid), nil)
	req.Header.Set("Authorization", "Bearer "+e.keys[org])
	req.Header.Set("Accept", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Stdout string }
	json.NewDecoder(res.Body).Decode(&out)
	return out.Stdout
}

// TestSnapshotQuotaOnRunsc: a snapshot is charged what it takes on disk —
// a block per entry and its copy of the base, not only its files' bytes —
// so a loop of snapshots of many empty directories is refused by the
// org's disk quota (403), two at once are not each given
// the whole room, each image's listed size is its charge, and what the
// images take on disk is within what was charged.
func TestSnapshotQuotaOnRunsc(t *testing.T) {
	t.Parallel() // see parallel_test.go
	images := imagesWithClasses(t)
	e := newEnvConfig(t, server.Config{Images: images})
	base, err := filepath.EvalSymlinks(filepath.Join(images, "exec"))
	if err != nil {
		t.Fatal(err)
	}
	// The class image's inodes are shared by every copy: not the loop's.
	shared := inodes(t, base, nil)
	const dirs = 3000
	many := fmt.Sprintf("mkdir many && cd many && seq %d | xargs mkdir", dirs)
	id, other := e.lease("acme", nil), e.lease("acme", nil)
	e.sh("acme", id, many)
	e.sh("acme", other, many+" && mkdir ../other")
	r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": "s0", "workdir": true}).JSON(t)
	size := int64(r["sizeBytes"].(float64))
	if size < dirs*4096 {
		t.Fatalf("a snapshot of %d empty directories is said to be %d bytes", dirs, size)
	}
	charged := func() int64 {
		var n int64
		for _, im := range ownImages(e.must(http.StatusOK, "GET", "/v1/images", "acme", nil).JSON(t)["images"].([]any)) {
			n += int64(im.(map[string]any)["sizeBytes"].(float64))
		}
		return n
	}
	// room sets the org's quota to what it uses and k more snapshots.
	room := func(k float64) int64 {
		q := (charged() + int64(k*float64(size)) + 1<<20 - 1) >> 20
		if err := e.srv.Store.SetOrgQuota(t.Context(), "acme", quota.Policy{DiskMiB: &q}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	refused := func(r resp) bool {
		if r.Status != http.StatusCreated && (r.Status != http.StatusForbidden || !strings.Contains(r.JSON(t)["error"].(string), "disk quota")) {
			t.Fatalf("a snapshot: %d %s", r.Status, r.Body)
		}
		return r.Status == http.StatusForbidden
	}

	// Two at once, with room for one and a half: one is refused.
	room(1.5)
	e.sh("acme", id, "mkdir many/again-0")
	answers := make(chan resp, 2)
	for i, sb := range []string{id, other} {
		go func() {
			answers <- e.do("POST", "/v1/sandbox/"+sb+"/snapshot", "acme", map[string]any{"name": fmt.Sprintf("c%d", i), "workdir": true})
		}()
	}
	if a, b := refused(<-answers), refused(<-answers); a == b {
		t.Errorf("two snapshots at once with room for one: refused %v and %v", a, b)
	}

	// The loop, with room for two and a half: refused at the third.
	quotaMiB := room(2.5)
	made := 0
	for i := 1; ; i++ {
		if i > 6 {
			t.Fatalf("%d snapshots of %d bytes each under a quota of %d MiB", made, size, quotaMiB)
		}
		e.sh("acme", id, fmt.Sprintf("mkdir many/again-%d", i))
		if refused(e.do("POST", "/v1/sandbox/"+id+"/snapshot", "acme", map[string]any{"name": fmt.Sprintf("s%d", i), "workdir": true})) {
			break
		}
		made++
	}
	if made != 2 {
		t.Errorf("%d snapshots made with room for 2.5 of them", made)
	}
	total := charged()
	if total > quotaMiB<<20 {
		t.Errorf("images of %d bytes listed under a quota of %d MiB", total, quotaMiB)
	}
	var used int64
	inodes(t, images, func(blocks int64, id [2]uint64) {
		if !shared[id] {
			used += blocks * 512
		}
	})
	if used > total {
		t.Errorf("the images take %d bytes on disk, more than the %d charged", used, total)
	}
	t.Logf("%d snapshots of %d bytes each; on disk %d bytes, charged %d", made+2, size, used, total)
	for _, g := range []string{"oci/.pull-*", ".snapshot-*"} {
		if left, _ := filepath.Glob(filepath.Join(images, g)); len(left) != 0 {
			t.Errorf("the refused snapshots left %v", left)
		}
	}
}

// inodes walks dir (not through links) and calls each with every inode's
// blocks, once per inode; it returns the set of them.
func inodes(t *testing.T, dir string, each func(blocks int64, id [2]uint64)) map[[2]uint64]bool {
	t.Helper()
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		id := [2]uint64{uint64(sys.Dev), sys.Ino}
		if !seen[id] {
			seen[id] = true
			if each != nil {
				each(sys.Blocks, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

// ownImages is an image list without its class images: the org's own
// and the server's.
func ownImages(list []any) []any {
	out := []any{}
	for _, im := range list {
		if im.(map[string]any)["scope"] != "class" {
			out = append(out, im)
		}
	}
	return out
}

// TestClassImagesListed: the image list names the class images the
// backend can start sandboxes of, after the org's own, each with its
// class and what it holds, and none it cannot (android: not buildable
// here), on both backends.
func TestClassImagesListed(t *testing.T) {
	onBackendsWith(t, server.Config{}, []string{"dev"}, func(t *testing.T, e *env) {
		classes := map[string]map[string]any{}
		for _, im := range e.must(http.StatusOK, "GET", "/v1/images", "acme", nil).JSON(t)["images"].([]any) {
			if m := im.(map[string]any); m["scope"] == "class" {
				classes[m["name"].(string)] = m
			}
		}
		for _, want := range []string{"exec", "dev"} {
			m := classes[want]
			if m == nil || m["class"] != want || !strings.Contains(fmt.Sprint(m["holds"]), "Python 3 with pip") || m["digest"] != "" {
				t.Errorf("class image %s: %v", want, m)
			}
		}
		if !strings.Contains(fmt.Sprint(classes["exec"]["holds"]), "pandas") {
			t.Errorf("the exec image does not say it holds the data stack: %v", classes["exec"])
		}
		if classes["android"] != nil {
			t.Errorf("android is listed, but cannot be built on this kind of host: %v", classes["android"])
		}
	})
}
