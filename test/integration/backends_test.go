package integration_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/server"
)

// One product, two backends: a black-box case written once runs against a
// server on this machine's gVisor and against a server on the test
// cluster, whose pods carry the runner as their init. A backend this
// machine lacks skips (or fails under scripts/test.sh) as its own suites
// do; a part of a case the backend cannot do is skipped by the capability
// it lacks (e.need), never by the backend's name.

// onBackends runs f as a subtest per backend, each on its own server made
// from cfg.
func onBackends(t *testing.T, cfg server.Config, f func(t *testing.T, e *env)) {
	t.Helper()
	onBackendsWith(t, cfg, nil, f)
}

// onBackendsWith is onBackends for a case that needs class images beyond
// exec (the cluster has them all, imported by scripts/test.sh).
func onBackendsWith(t *testing.T, cfg server.Config, images []string, f func(t *testing.T, e *env)) {
	t.Helper()
	t.Run("gvisor", func(t *testing.T) { f(t, newEnvConfig(t, cfg, images...)) })
	t.Run("kube", func(t *testing.T) {
		kc := cfg
		kc.Kube.RunnerImage = runnerImage(t)
		e, _, _ := newKubeEnvConfig(t, kc)
		f(t, e)
	})
}

// capabilities are what the server says its backend can do (GET /v1/info).
func (e *env) capabilities() (backend string, caps []string) {
	var info struct {
		Backend      string   `json:"backend"`
		Capabilities []string `json:"capabilities"`
	}
	json.Unmarshal(e.must(http.StatusOK, "GET", "/v1/info", "acme", nil).Body, &info)
	return info.Backend, info.Capabilities
}

// has says whether the server's backend has capability c.
func (e *env) has(c runtime.Capability) bool {
	_, caps := e.capabilities()
	for _, n := range caps {
		if n == string(c) {
			return true
		}
	}
	return false
}

// need skips the rest of t where the backend lacks capability c, saying
// which and why it matters.
func (e *env) need(t *testing.T, c runtime.Capability, what string) {
	t.Helper()
	if backend, _ := e.capabilities(); !e.has(c) {
		t.Skipf("the %s backend has no %q capability: %s", backend, c, what)
	}
}
