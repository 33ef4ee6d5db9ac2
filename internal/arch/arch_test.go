package arch

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/sandboxd/sandbox/"

type pkg struct {
	ImportPath string
	Deps       []string // transitive
	Imports    []string // direct
}

func list(t *testing.T) map[string]pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps,Imports", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, mod)] = p
	}
	return pkgs
}

func ours(deps []string) []string {
	var out []string
	for _, d := range deps {
		if strings.HasPrefix(d, mod) {
			out = append(out, strings.TrimPrefix(d, mod))
		}
	}
	return out
}

func TestLayering(t *testing.T) {
	pkgs := list(t)
	backends := []string{"internal/runtime/gvisor", "internal/runtime/kube", "internal/runtime/fake"}
	rules := []struct {
		pkg    string
		never  []string // not even transitively
		direct bool     // check direct imports only
	}{
		{"internal/sandbox", []string{"internal/"}, false},
		// The wire types depend on nothing of ours: a program outside the
		// module uses every one.
		{"wire", []string{"internal/", "client"}, false},
		// The shared flag values depend on nothing of ours.
		{"internal/flagx", []string{"internal/"}, false},
		// So does the bounded buffer every part keeps a command's output in.
		{"internal/capture", []string{"internal/"}, false},
		// The runtime's core and capabilities know no backend.
		{"internal/runtime", backends, false},
		{"internal/store", append([]string{"internal/runtime"}, backends...), false},
		{"internal/service", backends, false},
		{"internal/reaper", backends, false},
		{"internal/api", backends, false},
		{"internal/ops", backends, false},
		{"internal/catalog", backends, false},
		{"internal/processes", append([]string{"internal/api"}, backends...), false},
		// The code contexts reach kernels only through the processes'
		// daemon seam: no store, API or backend.
		{"internal/contexts", append([]string{"internal/api", "internal/processes"}, backends...), false},
		{"internal/contexts", []string{"internal/store"}, true},
		{"internal/files", append([]string{"internal/store", "internal/api"}, backends...), true},
		{"internal/preview", append([]string{"internal/service", "internal/store"}, backends...), false},
		{"internal/catalog", []string{"internal/api", "internal/server"}, false},
		// The stats stand on the service's seam: no backend, no API above
		// them, and never the store directly.
		{"internal/stats", append([]string{"internal/api"}, backends...), false},
		{"internal/stats", []string{"internal/store"}, true},
		// The volumes own the project locks the service's lease takes
		// (service.ProjectLocks): they never import the service.
		{"internal/volumes", append([]string{"internal/service", "internal/api"}, backends...), false},
		// The org's quota report reads the store and the one count of
		// commands: never the service, nor a runtime.
		{"internal/usage", append([]string{"internal/service", "internal/api", "internal/runtime"}, backends...), false},
		// The lease credential stands beside the service, seen by it only
		// through service.Credentials: it knows no service, store, API or
		// backend, and the service does not know it.
		{"internal/credential", append([]string{"internal/service", "internal/store", "internal/api"}, backends...), false},
		{"internal/service", []string{"internal/credential"}, false},
		// The warm pool keeps sandboxes for the service's leases through the
		// runtime's core alone: no service, store, API or backend.
		{"internal/warm", append([]string{"internal/service", "internal/store", "internal/api"}, backends...), false},
		{"internal/mcpserver", backends, false},
		{"internal/terminal", backends, false},
		{"internal/interp", backends, false},
		// The console and the interpreter reach sandboxes only through
		// their own interfaces: never the store directly.
		{"internal/terminal", []string{"internal/store"}, true},
		{"internal/interp", []string{"internal/store"}, true},
	}
	for _, r := range rules {
		p, ok := pkgs[r.pkg]
		if !ok {
			t.Errorf("no package %s", r.pkg)
			continue
		}
		deps := p.Deps
		if r.direct {
			deps = p.Imports
		}
		for _, d := range ours(deps) {
			for _, n := range r.never {
				if d == n || strings.HasPrefix(d, n) && strings.HasSuffix(n, "/") {
					t.Errorf("%s depends on %s", r.pkg, d)
				}
			}
		}
	}
}
