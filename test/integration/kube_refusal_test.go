package integration_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/server"
)

// refusalBound is how soon a lease the cluster refused must be answered:
// the scheduler says so within a second or two, and the start timeout of
// these servers is minutes (the backend's own bound, 2 minutes, is the one
// that holds), so an answer under it came from the scheduler, not a timer.
const refusalBound = 20 * time.Second

// newKubeEnvSlowStart is newKubeEnv whose starts may take minutes, and a
// count of the pods in its namespace; storageClass names the project
// volumes' StorageClass (empty: the cluster's default).
func newKubeEnvSlowStart(t *testing.T, storageClass string) (*env, func() int) {
	t.Helper()
	cfg := server.Config{}
	cfg.Service.StartTimeout = 5 * time.Minute
	cfg.Kube.StorageClass = storageClass
	e, c, ns := newKubeEnvConfig(t, cfg)
	return e, func() int {
		t.Helper()
		l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
}

// TestKubeUnboundClaim: a project lease whose claim no provisioner serves
// (a StorageClass the cluster does not have; its default one, local-path,
// would bind it) is answered at once with the cluster's reason and what is
// missing, leaves no pod, and is kept as an error row saying the same.
func TestKubeUnboundClaim(t *testing.T) {
	e, pods := newKubeEnvSlowStart(t, "sbt-nobody-serves-this")
	start := time.Now()
	r := e.do("POST", "/v1/sandbox", "acme", map[string]any{"class": "dev", "project": "nopv", "ttlSec": 300})
	took := time.Since(start)
	msg, _ := r.JSON(t)["error"].(string)
	t.Logf("answered %d in %v: %s", r.Status, took.Round(time.Millisecond), msg)
	if r.Status != http.StatusServiceUnavailable || took > refusalBound || r.Header.Get("Retry-After") != "" ||
		!strings.HasPrefix(msg, "the sandbox could not be started: the cluster says: Unschedulable: ") ||
		!strings.Contains(msg, "unbound immediate PersistentVolumeClaims") || !strings.Contains(msg, `no provisioner serves StorageClass "sbt-nobody-serves-this"`) {
		t.Errorf("a project lease with no provisioner: %d after %v, Retry-After %q: %q", r.Status, took, r.Header.Get("Retry-After"), msg)
	}
	if n := pods(); n != 0 {
		t.Errorf("the refused lease left %d pods", n)
	}
	l, _ := e.must(http.StatusOK, "GET", "/v1/sandbox?status=error", "acme", nil).JSON(t)["sandboxes"].([]any)
	if len(l) != 1 {
		t.Fatalf("error rows: %v", l)
	}
	row := l[0].(map[string]any)
	if why, _ := row["error"].(string); !strings.Contains(why, "unbound immediate PersistentVolumeClaims") || !strings.Contains(msg, row["id"].(string)) {
		t.Errorf("the error row %v after %q", row, msg)
	}
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+row["id"].(string), "acme", nil)
}

// TestKubeNoRoom: exec sandboxes are leased until the node is full (each
// pod requests a quarter of its class's core: eight on the 2-core test
// node); the first that does not fit is a 503 with Retry-After and the
// scheduler's "Insufficient cpu", answered at once, leaving no pod and no
// row; ending one sandbox makes the retry succeed.
func TestKubeNoRoom(t *testing.T) {
	e, pods := newKubeEnvSlowStart(t, "")
	var ids []string
	defer func() {
		for _, id := range ids {
			e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
		}
		if n := pods(); n != 0 {
			t.Errorf("%d pods after every sandbox ended", n)
		}
	}()
	var refused resp
	var took time.Duration
	for len(ids) < 16 { // the exec quota; the node is full long before
		start := time.Now()
		r := e.do("POST", "/v1/sandbox", "acme", map[string]any{"ttlSec": 600})
		if r.Status == http.StatusCreated {
			ids = append(ids, r.JSON(t)["id"].(string))
			continue
		}
		refused, took = r, time.Since(start)
		break
	}
	msg, _ := refused.JSON(t)["error"].(string)
	t.Logf("%d leased; the next answered %d in %v, Retry-After %q: %s", len(ids), refused.Status, took.Round(time.Millisecond), refused.Header.Get("Retry-After"), msg)
	if len(ids) == 0 || refused.Status != http.StatusServiceUnavailable || took > refusalBound || refused.Header.Get("Retry-After") != "10" ||
		!strings.HasPrefix(msg, "the cluster cannot place the sandbox now: ") || !strings.Contains(msg, "Insufficient cpu") || !strings.HasSuffix(msg, "; retry later") {
		t.Fatalf("the lease past the node's room: %d after %v, Retry-After %q: %q", refused.Status, took, refused.Header.Get("Retry-After"), msg)
	}
	if n := pods(); n != len(ids) {
		t.Errorf("%d pods for %d sandboxes: the refused lease left its pod", n, len(ids))
	}
	if l, _ := e.must(http.StatusOK, "GET", "/v1/sandbox", "acme", nil).JSON(t)["sandboxes"].([]any); len(l) != len(ids) {
		t.Errorf("%d rows for %d sandboxes: the refused lease left its row", len(l), len(ids))
	}

	// Room made, the retry is placed.
	e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+ids[0], "acme", nil)
	ids = ids[1:]
	ids = append(ids, e.lease("acme", map[string]any{"ttlSec": 600}))
	if out := e.sh("acme", ids[len(ids)-1], "echo placed"); out != "placed\n" {
		t.Errorf("the retried sandbox: %q", out)
	}
}
