package testenv

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is a real CNCF distribution registry (Debian's docker-registry)
// on loopback, started for one test.
type Registry struct {
	Host     string // 127.0.0.1:PORT
	User     string // with basic auth: the one account; else empty
	Password string
}

// RegistryPart is the SANDBOX_TEST_REQUIRE name of the registry.
const RegistryPart = "registry"

// NeedRegistry starts a registry on a free loopback port, with basic auth
// (user "tester" and a fresh password) when auth is set, and stops it at
// the test's end; it skips (fails in CI) where the package is missing.
func NeedRegistry(t testing.TB, auth bool) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		Missing(t, RegistryPart, "docker-registry (Debian's package; scripts/deps.sh installs it for the tests)")
	}
	dir := t.TempDir()
	r := &Registry{}
	authCfg := ""
	if auth {
		r.User, r.Password = "tester", fmt.Sprintf("pw-%d", time.Now().UnixNano())
		hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(r.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		authCfg = fmt.Sprintf("auth:\n  htpasswd:\n    realm: test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	// A free port is only free until someone takes it: a registry that
	// could not bind exits, and is started again on another.
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		err = startRegistry(t, exec.Command(bin), addr, dir, authCfg)
		if err == nil {
			r.Host = addr
			break
		}
		if attempt == 3 {
			t.Fatal(err)
		}
	}
	return r
}

// startRegistry starts one registry (cmd, to which "serve CONFIG" is
// added) on addr and answers once it serves there, or why it did not.
func startRegistry(t testing.TB, cmd *exec.Cmd, addr, dir, authCfg string) error {
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n%s",
		filepath.Join(dir, "data"), addr, authCfg)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Args = append(cmd.Args, "serve", filepath.Join(dir, "config.yml"))
	logf, _ := os.Create(filepath.Join(dir, "registry.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
	}
	for i := 0; i < 100; i++ {
		select {
		case <-exited:
			logf.Close()
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			return fmt.Errorf("the registry exited on %s: %s", addr, b)
		default:
		}
		// Ours, not whatever else took the port first: a registry says so.
		if res, err := http.Get("http://" + addr + "/v2/"); err == nil {
			res.Body.Close()
			if res.Header.Get("Docker-Distribution-Api-Version") == "registry/2.0" {
				t.Cleanup(stop)
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
	return fmt.Errorf("the registry did not answer on %s: %s", addr, b)
}
