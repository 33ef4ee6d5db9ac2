package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/runtime/gvisor"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestCLITenantImages: the tenant's image verbs of the binary on a real
// server and a loopback registry with basic auth — pull (the password
// from stdin; none, or a registry the server does not allow, refused),
// images, a lease on the image, snapshot --workdir and a run-code session
// on it, the completion of rmi, rmi refused while in use.
func TestCLITenantImages(t *testing.T) {
	reg := testenv.NeedRegistry(t, true)
	srv := testenv.ServeWith(t, gvisor.DefaultRunsc(), []string{"acme"}, testenv.Options{ImageAllow: []string{reg.Host}})
	home := t.TempDir()
	c := cli{t: t, bin: srv.Bin, home: home, env: []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "SANDBOX_URL=" + srv.URL, "SANDBOX_KEY=" + srv.Keys["acme"]}}
	ref := reg.PushBusybox(t, "team/tool:1", map[string]string{"etc/greeting": "hi from the image\n"})

	if _, errs, code := c.run("", "pull", "tool", ref); code != 2 || !strings.Contains(errs, "400") || !strings.Contains(errs, "credentials") {
		t.Errorf("pull without credentials: %d %q", code, errs)
	}
	if _, errs, code := c.run("", "pull", "tool", ref, "--username", reg.User); code != 2 || !strings.Contains(errs, "--password-stdin") {
		t.Errorf("pull with a username and no --password-stdin: %d %q", code, errs)
	}
	if _, errs, code := c.run("", "pull", "x", "127.0.0.2:1/x:1"); code != 2 || !strings.Contains(errs, "403") {
		t.Errorf("pull from a registry the server does not allow: %d %q", code, errs)
	}
	out, errs, code := c.run(reg.Password+"\n", "pull", "tool", ref, "--username", reg.User, "--password-stdin")
	if code != 0 || !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "tool ") || !strings.Contains(out, " org ") || !strings.Contains(out, ref) {
		t.Fatalf("pull: %d %q %q", code, out, errs)
	}
	if strings.Contains(out+errs, reg.Password) {
		t.Errorf("pull printed the password: %q %q", out, errs)
	}

	var sb struct{ ID, Image string }
	json.Unmarshal([]byte(c.must("lease", "--image", "tool", "-o", "json")), &sb)
	if out := c.must("exec", sb.ID, "--", "cat", "/etc/greeting"); out != "hi from the image\n" {
		t.Errorf("in the pulled image: %q", out)
	}

	// snapshot --workdir, and a run-code session on it.
	var base struct{ ID string }
	json.Unmarshal([]byte(c.must("lease", "-o", "json")), &base)
	c.must("exec", base.ID, "--", "sh", "-c", "mkdir -p ~/.config && echo 6 > ~/.config/n && echo seven > notes.txt")
	var snap struct{ Name, Digest, Scope, Source string }
	if err := json.Unmarshal([]byte(c.must("snapshot", base.ID, "tpl", "--workdir", "-o", "json")), &snap); err != nil || snap.Name != "tpl" || snap.Scope != "org" ||
		snap.Source != "snapshot of "+base.ID || !strings.HasPrefix(snap.Digest, "sha256:") {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	prog := filepath.Join(home, "p.py")
	os.WriteFile(prog, []byte("import os\nprint(int(open(os.path.expanduser('~/.config/n')).read()) * 7, open('notes.txt').read().strip())\n"), 0o644)
	if out, errs, code := c.run("", "run-code", "--image", "tpl", prog); code != 0 || out != "42 seven\n" {
		t.Errorf("run-code --image: %d %q %q", code, out, errs)
	}
	if _, errs, code := c.run("", "snapshot", base.ID); code != 2 || !strings.Contains(errs, "wrong number of arguments") {
		t.Errorf("snapshot without a name: %d %q", code, errs)
	}

	var list struct {
		Images []struct{ Name, Digest, Scope string }
	}
	json.Unmarshal([]byte(c.must("images", "-o", "json")), &list)
	var names []string
	for _, im := range list.Images {
		if im.Scope != "class" {
			names = append(names, im.Name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"tool", "tpl"}) {
		t.Errorf("images -o json: %+v", list)
	}
	if out := c.must("images"); !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "tpl ") || !strings.Contains(out, "snapshot of "+base.ID) ||
		!strings.Contains(out, "--class exec: Python 3 with pip") {
		t.Errorf("images:\n%s", out)
	}

	// Completion of rmi: the org's image names.
	script := c.must("completion", "bash")
	cmd := exec.Command("bash", "-c", script+`
COMP_WORDS=(sandbox sn); COMP_CWORD=1; _sandbox; echo "${COMPREPLY[@]}"
COMP_WORDS=(sandbox rmi ""); COMP_CWORD=2; _sandbox; echo "${COMPREPLY[@]}"`)
	cmd.Env = append(c.env, "PATH="+filepath.Dir(c.bin)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "snapshot\n") || !strings.Contains(string(out), "tool tpl\n") {
		t.Errorf("bash completion: %v %q", err, out)
	}

	// rmi: refused while the sandbox runs the image, then done.
	if _, errs, code := c.run("", "rmi", "tool"); code != 2 || !strings.Contains(errs, "409") {
		t.Errorf("rmi while in use: %d %q", code, errs)
	}
	c.must("end", sb.ID)
	if out := c.must("rmi", "tool"); !strings.Contains(out, "tool ") {
		t.Errorf("rmi: %q", out)
	}
	if _, errs, code := c.run("", "rmi", "tool"); code != 2 || !strings.Contains(errs, "404") {
		t.Errorf("rmi again: %d %q", code, errs)
	}
	if out := c.must("images"); strings.Contains(out, "tool ") {
		t.Errorf("images after rmi:\n%s", out)
	}
}
