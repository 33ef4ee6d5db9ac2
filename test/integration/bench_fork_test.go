package integration_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/sandbox"
)

// BenchmarkFork: POST /fork of an idle exec sandbox until the fork runs,
// beside a fresh lease in the same run (the target: fork ≤ 1.5× lease),
// and a fork of one whose process holds 500 MB (the checkpoint writes, and
// the restore reads, every page).
func BenchmarkFork(b *testing.B) {
	e := benchEnv(b)
	forkOf := func(id string) func() func() {
		return func() func() {
			r := e.must(http.StatusCreated, "POST", "/v1/sandbox/"+id+"/fork", "acme", nil)
			fork, _ := r.JSON(b)["id"].(string)
			return func() { e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+fork, "acme", nil) }
		}
	}
	idle := e.lease("acme", nil)
	b.Run("idle", func(b *testing.B) { measure(b, nil, forkOf(idle)) })
	b.Run("floor", func(b *testing.B) { forkFloor(b, e) })
	b.Run("lease", func(b *testing.B) { measure(b, nil, func() func() { return e.leaseTimed(nil) }) })
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+idle, "acme", nil)

	big := e.lease("acme", nil)
	p := e.startProcess("acme", big, map[string]any{"argv": []string{"python3", "-u", "-c",
		"import time\nb = bytearray(500 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ntime.sleep(3600)"}})
	for {
		st := e.process("acme", big, p.Pid)
		if st.OutputBytes > 0 {
			break
		}
		if st.Status != "running" {
			b.Fatalf("the 500 MB process: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Run("500MB", func(b *testing.B) { measure(b, nil, forkOf(big)) })
}

// forkFloor is the fork's own floor, on the one running sandbox: what the
// gVisor backend's fork does, with raw runsc and nothing else — `runsc
// checkpoint --leave-running` of the original beside `runsc create` of a
// copy of its bundle, then `runsc restore --detach` of the copy from that
// image. No row, no credential, no HTTP.
func forkFloor(b *testing.B, e *env) {
	dir, flags, src := bundleOf(b, e)
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	var spec map[string]any
	json.Unmarshal(config, &spec)
	run := func(args ...string) error { return runscErr(flags, args...) }
	var name, bundle, img string
	var dropNS func()
	setup := func() {
		name = sandbox.NewName()
		bundle, img = filepath.Join(e.data, "floor-"+name), filepath.Join(e.data, "floorimg-"+name)
		os.Mkdir(bundle, 0o700)
		os.Mkdir(img, 0o700)
		spec["linux"].(map[string]any)["cgroupsPath"] = "/sandbox/" + name
		dropNS = ownLoopback(b, bundle, spec)
		raw, _ := json.Marshal(spec)
		os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o600)
	}
	measure(b, setup, func() func() {
		checkpoint := make(chan error, 1)
		go func() { checkpoint <- run("checkpoint", "--leave-running", "--image-path", img, src) }()
		err := run("create", "--bundle", bundle, name)
		if cerr := <-checkpoint; err == nil {
			err = cerr
		}
		if err == nil {
			err = run("restore", "--detach", "--image-path", img, "--bundle", bundle, name)
		}
		if err != nil {
			b.Fatalf("the fork's floor: %v", err)
		}
		return func() {
			run("delete", "--force", name)
			dropNS()
			os.RemoveAll(bundle)
			os.RemoveAll(img)
		}
	})
}
