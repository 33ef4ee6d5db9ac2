package gvisor

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestRunscFiltersPrecompiled: the pinned runsc's sentry and gofer install
// seccomp programs compiled when it was built (scripts/deps.sh with
// filtergen), not compiled from the rules at each boot, under the global
// flags the runtime boots every sandbox with. The key a program is found by
// depends on the platform, host networking (never used) and directfs, not
// on --network=none against sandbox, so one boot stands for both.
func TestRunscFiltersPrecompiled(t *testing.T) {
	r := newRuntime(t)
	rootfs, err := image.Rootfs(testenv.Images(), "exec")
	if err != nil {
		t.Fatal(err)
	}
	bundle, root, logs := t.TempDir(), t.TempDir(), t.TempDir()
	if out, err := exec.Command(r.cfg.Runsc, "spec", "--bundle", bundle, "--", "/bin/true").CombinedOutput(); err != nil {
		t.Fatalf("runsc spec: %v: %s", err, out)
	}
	cfg, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(cfg, &spec); err != nil {
		t.Fatal(err)
	}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	if cfg, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}

	flags := r.globalFlags(0, false)
	for i, f := range flags {
		if f == "--root" {
			flags[i+1] = root // a state directory of its own: none of the runtime's
		}
	}
	args := append(flags, "--debug", "--debug-log="+logs+"/", "run", "--bundle", bundle, "filters-test")
	if out, err := exec.Command(r.cfg.Runsc, args...).CombinedOutput(); err != nil {
		t.Fatalf("runsc %s: %v: %s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		exec.Command(r.cfg.Runsc, "--root", root, "delete", "--force", "filters-test").Run()
		// runsc's own namespace for --network=none, mounted in its root.
		unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH)
	})

	for log, part := range map[string]string{"boot": "sentry", "gofer": "gofer"} {
		found, _ := filepath.Glob(filepath.Join(logs, "*"+log+"*"))
		if len(found) == 0 {
			t.Errorf("no %s log among runsc's debug logs in %s", part, logs)
			continue
		}
		var text string
		for _, f := range found {
			b, _ := os.ReadFile(f)
			text += string(b)
		}
		if i := strings.Index(text, "No precompiled program found"); i >= 0 {
			line, _, _ := strings.Cut(text[i:], "\n")
			t.Errorf("the %s compiled its seccomp program at boot: %s (a runsc built without filtergen: scripts/deps.sh builds it again)", part, line)
		} else if !strings.Contains(text, "Loaded precompiled seccomp instructions") {
			t.Errorf("the %s's debug log says nothing of its seccomp program:\n%s", part, lastLines(text, 20))
		}
	}
}
