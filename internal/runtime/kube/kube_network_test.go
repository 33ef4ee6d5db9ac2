package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandbox/internal/netpolicy"
	"github.com/sandboxd/sandbox/internal/reaper"
	"github.com/sandboxd/sandbox/internal/runtime"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// The test's own small internet: testenv.RoutedInternet.
const (
	netHost = testenv.RoutedHost // a host address inside an allowed range
	netA    = testenv.RoutedA
	netB    = testenv.RoutedB
	netC    = testenv.RoutedC
)

// fetch is run inside a sandbox: GET argv[1] within 3 s, the body on
// stdout, exit 1 on any failure.
const fetch = `import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode(), end="")
except Exception as e:
    print("refused:", e, file=sys.stderr); sys.exit(1)`

type kubeNet struct {
	rt     *kube.Runtime
	client kubernetes.Interface
	ns     string
}

func newKubeNet(t *testing.T) *kubeNet {
	t.Helper()
	path := testenv.NeedKube(t)
	c, ns := testenv.KubeNamespace(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := kube.Open(ctx, kube.Options{Kubeconfig: path, Namespace: ns, RuntimeClass: "gvisor", ClusterCIDRs: []string{"10.244.0.0/16", "10.96.0.0/16"}}, kube.Hooks{}, log)
	if err != nil {
		t.Fatal(err)
	}
	return &kubeNet{rt: rt, client: c, ns: ns}
}

func (k *kubeNet) create(t *testing.T, p *netpolicy.Policy) runtime.Object {
	t.Helper()
	id := sandbox.NewID()
	name := "sbx-" + strings.ToLower(id[3:15])
	spec := runtime.Spec{
		Name: name, Image: "exec", Runtime: sandbox.RuntimeGVisor, Workdir: "/work",
		Labels: map[string]string{runtime.LabelSandbox: id, runtime.LabelOrg: "nettest"},
		Volume: runtime.Volume{Name: "scratch-" + name, Scratch: true, SizeMiB: 64}, CPUs: 1, MemoryMiB: 256,
	}
	if p != nil {
		r, err := netpolicy.Parse(p)
		if err != nil {
			t.Fatal(err)
		}
		spec.Network = r
	}
	obj, err := k.rt.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.rt.Delete(context.Background(), runtime.Ref{Name: obj.Name, UID: obj.UID}) })
	return obj
}

// get fetches url from inside the sandbox: its body, or "" and why not.
func (k *kubeNet) get(t *testing.T, name, url string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := k.rt.Exec(ctx, name, runtime.ExecRequest{Argv: []string{"python3", "-c", fetch, url}, Stdout: &out, Stderr: &errb})
	if err != nil {
		return "", fmt.Sprintf("%v: %s", err, strings.TrimSpace(errb.String()))
	}
	return out.String(), ""
}

func (k *kubeNet) reaches(t *testing.T, name, url string) {
	t.Helper()
	if body, why := k.get(t, name, url); !strings.HasPrefix(body, "internet ") {
		t.Errorf("%s: %s is not reached: %s", name, url, why)
	}
}

func (k *kubeNet) refused(t *testing.T, name, url string) {
	t.Helper()
	if body, _ := k.get(t, name, url); body != "" {
		t.Errorf("%s: %s was reached (%q): the policy does not hold", name, url, body)
	}
}

// eventually retries check until it passes or 15 s went by: a changed
// NetworkPolicy reaches the enforcer through its informer.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if ok() {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not within 15 s", what)
			return
		}
	}
}

// TestKubeEgressEnforced is the CIDR matrix of issue 12 on the real test
// cluster, with kube-network-policies enforcing (scripts/kube-up.sh).
func TestKubeEgressEnforced(t *testing.T) {
	k := newKubeNet(t)
	testenv.NewRoutedInternet(t)
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0") // every host address: the apiserver's stand-in
	if err != nil {
		t.Fatal(err)
	}
	hostSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "internet (the host!)") })}
	go hostSrv.Serve(hostLn)
	defer hostSrv.Close()
	hostPort := fmt.Sprint(hostLn.Addr().(*net.TCPAddr).Port)

	none := k.create(t, nil)
	open := k.create(t, &netpolicy.Policy{
		Allow: []string{"198.51.100.0/24", "203.0.113.0/24"}, Deny: []string{netC}, Ports: []int{80},
	})
	inet := k.create(t, &netpolicy.Policy{Allow: []string{"internet"}})

	t.Run("none reaches nothing", func(t *testing.T) {
		for _, u := range []string{"http://" + netA + "/", "http://" + netB + "/", "http://" + netA + ":8080/"} {
			k.refused(t, none.Name, u)
		}
	})
	t.Run("the deny-all is what denies", func(t *testing.T) {
		// The control: this namespace without its deny-all lets the pod
		// out (the test network and the host guard allow it), so the
		// refusals here are the NetworkPolicy's, enforced.
		nps := k.client.NetworkingV1().NetworkPolicies(k.ns)
		if err := nps.Delete(context.Background(), kube.IsolationPolicy, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "reached without the deny-all", func() bool { b, _ := k.get(t, none.Name, "http://"+netA+"/"); return b != "" })
		if err := k.rt.Isolate(context.Background()); err != nil {
			t.Fatal(err)
		}
		eventually(t, "refused with the deny-all back", func() bool { b, _ := k.get(t, none.Name, "http://"+netA+"/"); return b == "" })

		// A policy of that name that allows everything (made by someone
		// else, or changed) is not trusted for its name: Isolate puts the
		// deny-all back.
		cur, err := nps.Get(context.Background(), kube.IsolationPolicy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
		if _, err := nps.Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "reached with an allow-all of the isolation's name", func() bool { b, _ := k.get(t, none.Name, "http://"+netA+"/"); return b != "" })
		if err := k.rt.Isolate(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, _ := nps.Get(context.Background(), kube.IsolationPolicy, metav1.GetOptions{}); got == nil || len(got.Spec.Egress) != 0 {
			t.Fatalf("Isolate kept an allow-all of its name: %+v", got)
		}
		eventually(t, "refused with the deny-all put back", func() bool { b, _ := k.get(t, none.Name, "http://"+netA+"/"); return b == "" })
	})
	t.Run("allowed CIDR and port", func(t *testing.T) {
		k.reaches(t, open.Name, "http://"+netA+"/")
		k.reaches(t, open.Name, "http://"+netB+"/")
	})
	t.Run("denied inside allowed, port not allowed", func(t *testing.T) {
		k.refused(t, open.Name, "http://"+netC+"/")
		k.refused(t, open.Name, "http://"+netA+":8080/")
	})
	t.Run("internet", func(t *testing.T) {
		k.reaches(t, inet.Name, "http://"+netA+":8080/")
		k.reaches(t, inet.Name, "http://"+netC+"/")
	})
	t.Run("never the host or the cluster", func(t *testing.T) {
		nodes, err := k.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		targets := []string{netHost, "10.244.0.1"} // the host's end of the test net (in an allowed range), the pods' gateway
		for _, nd := range nodes.Items {
			for _, a := range nd.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					targets = append(targets, a.Address)
				}
			}
		}
		// The control: the host itself reaches its listener at each
		// address, so a refusal below is the sandbox's, not a listener
		// that is not there.
		local := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
		for _, h := range targets {
			resp, err := local.Get("http://" + h + ":" + hostPort + "/")
			if err != nil {
				t.Fatalf("the host does not reach its own listener at %s: %v", h, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "internet (the host!)" {
				t.Fatalf("the host's own listener at %s answered %q %v", h, b, err)
			}
			k.refused(t, open.Name, "http://"+h+":"+hostPort+"/")
			k.refused(t, inet.Name, "http://"+h+":"+hostPort+"/")
		}
		// The apiserver, by its service address (10.96.0.1 here) and by
		// every address the kubernetes endpoints name.
		svc, err := k.client.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k.refused(t, inet.Name, "https://"+svc.Spec.ClusterIP+"/")
	})
	t.Run("a neighbour", func(t *testing.T) {
		p, err := k.client.CoreV1().Pods(k.ns).Get(context.Background(), none.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go k.rt.Exec(ctx, none.Name, runtime.ExecRequest{Argv: []string{"python3", "-m", "http.server", "8080"}, Dir: "/tmp"})
		eventually(t, "the neighbour's server answers its own loopback", func() bool {
			b, _ := k.get(t, none.Name, "http://127.0.0.1:8080/")
			return b != ""
		})
		k.refused(t, inet.Name, "http://"+p.Status.PodIP+":8080/")
		k.refused(t, open.Name, "http://"+p.Status.PodIP+":8080/")
	})
	t.Run("changing a live sandbox's policy", func(t *testing.T) {
		if err := k.rt.SetNetwork(context.Background(), none.Name, mustRules(t, netpolicy.Policy{Allow: []string{netB}})); err != nil {
			t.Fatal(err)
		}
		eventually(t, "opened", func() bool { b, _ := k.get(t, none.Name, "http://"+netB+"/"); return b != "" })
		k.refused(t, none.Name, "http://"+netA+"/")
		if err := k.rt.SetNetwork(context.Background(), open.Name, mustRules(t, netpolicy.Policy{})); err != nil {
			t.Fatal(err)
		}
		eventually(t, "closed", func() bool { b, _ := k.get(t, open.Name, "http://"+netA+"/"); return b == "" })
		if _, err := k.client.NetworkingV1().NetworkPolicies(k.ns).Get(context.Background(), open.Name+"-egress", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("closed sandbox's NetworkPolicy: %v, want gone", err)
		}
	})
	t.Run("gone after end", func(t *testing.T) {
		if err := k.rt.Delete(context.Background(), runtime.Ref{Name: inet.Name, UID: inet.UID}); err != nil {
			t.Fatal(err)
		}
		if _, err := k.client.NetworkingV1().NetworkPolicies(k.ns).Get(context.Background(), inet.Name+"-egress", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ended sandbox's NetworkPolicy: %v, want gone", err)
		}
	})
	t.Run("gone after the sweep", func(t *testing.T) {
		obj := k.create(t, &netpolicy.Policy{Allow: []string{netA}})
		r := &reaper.Reaper{Store: noRows{}, Runtime: k.rt, Log: slog.New(slog.DiscardHandler),
			Now: func() time.Time { return time.Now().Add(time.Hour) }}
		if _, err := r.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := k.client.CoreV1().Pods(k.ns).Get(context.Background(), obj.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("swept pod: %v, want gone", err)
		}
		if l, err := k.client.NetworkingV1().NetworkPolicies(k.ns).List(context.Background(), metav1.ListOptions{LabelSelector: runtime.LabelSandbox}); err != nil {
			t.Fatalf("listing: %v", err)
		} else if len(l.Items) != 0 {
			t.Errorf("%d egress NetworkPolicies left after the sweep", len(l.Items))
		}
	})
}

// TestKubeEgressGarbageCollected: a pod deleted behind the server's back
// (by hand, or a server killed between the two deletes) takes its
// NetworkPolicy with it: the policy is owned by the pod.
func TestKubeEgressGarbageCollected(t *testing.T) {
	k := newKubeNet(t)
	obj := k.create(t, &netpolicy.Policy{Allow: []string{netA}})
	if err := k.client.CoreV1().Pods(k.ns).Delete(context.Background(), obj.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "garbage collected", func() bool {
		_, err := k.client.NetworkingV1().NetworkPolicies(k.ns).Get(context.Background(), obj.Name+"-egress", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestKubeEgressRefusesNames: domain rules cannot be a NetworkPolicy.
func TestKubeEgressRefusesNames(t *testing.T) {
	k := newKubeNet(t)
	r := mustRules(t, netpolicy.Policy{Allow: []string{"pypi.org"}})
	_, err := k.rt.Create(context.Background(), runtime.Spec{Name: "sbx-names", Network: r,
		Labels: map[string]string{runtime.LabelSandbox: "sb_names"}, Image: "exec", Runtime: sandbox.RuntimeGVisor, Workdir: "/work",
		Volume: runtime.Volume{Name: "scratch-names", Scratch: true}})
	if err == nil || !strings.Contains(err.Error(), "pypi.org") {
		t.Fatalf("Create with a domain rule: %v", err)
	}
	if _, err := k.client.CoreV1().Pods(k.ns).Get(context.Background(), "sbx-names", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused lease left a pod: %v", err)
	}
}

func mustRules(t *testing.T, p netpolicy.Policy) *netpolicy.Rules {
	t.Helper()
	r, err := netpolicy.Parse(&p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// noRows is a store with no sandboxes: everything is an orphan.
type noRows struct{}

func (noRows) Orgs(context.Context) ([]string, error) { return nil, nil }
func (noRows) List(context.Context, store.Filter) ([]*sandbox.Sandbox, error) {
	return nil, nil
}

// probe runs testenv.NetProbe's checks in the sandbox pod name: a line
// each, "ok ..." or "fail ...".
func (k *kubeNet) probe(t *testing.T, name string, checks ...[]any) []string {
	t.Helper()
	raw, _ := json.Marshal(checks)
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := k.rt.Exec(ctx, name, runtime.ExecRequest{Argv: []string{"python3", "-c", testenv.NetProbe, string(raw)}, Stdout: &out, Stderr: &errb})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || len(lines) != len(checks) {
		t.Fatalf("probe: %v: %s%s", err, out.String(), errb.String())
	}
	return lines
}

// expect checks each line against want's prefix ("ok", "ok DETAIL",
// "fail").
func expect(t *testing.T, what string, checks [][]any, got, want []string) {
	t.Helper()
	for i := range checks {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("%s: %v = %q, want %q", what, checks[i], got[i], want[i])
		}
	}
}

func chk(args ...any) []any { return args }

// TestKubeEgressNames is the gVisor backend's domain matrix on the real
// test cluster: the egress gateway (a Deployment of the server's image) is
// every pod's resolver and the name-checking proxy of a policy with names,
// kube-network-policies enforces the rest. Allowed names work (HTTP, TLS,
// the policy's port); a raw address, another name behind an allowed one's
// address (by Host, by SNI), metadata, private hosts, the host, another
// resolver and made-up names do not; a live change holds; "internet"
// resolves and reaches addresses; a policy the cluster cannot hold is
// refused.
func TestKubeEgressNames(t *testing.T) {
	path := testenv.NeedKube(t)
	image := testenv.RunnerImage(t)
	c, ns := testenv.KubeNamespace(t)
	in := testenv.NewRoutedInternet(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := kube.Open(context.Background(), kube.Options{Kubeconfig: path, Namespace: ns, RuntimeClass: "gvisor",
		ClusterCIDRs: []string{"10.244.0.0/16", "10.96.0.0/16"}, RunnerImage: image, GatewayDNS: testenv.RoutedDNS}, kube.Hooks{}, log)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeNet{rt: rt, client: c, ns: ns}
	t.Cleanup(func() {
		if t.Failed() {
			if l, err := c.CoreV1().Pods(ns).GetLogs(podOf(t, c, ns), &corev1.PodLogOptions{}).Do(context.Background()).Raw(); err == nil {
				t.Logf("the gateway's log:\n%s", l)
			}
		}
	})

	named := k.create(t, &netpolicy.Policy{Allow: []string{"allowed.example", "rebind.example"}})
	checks := [][]any{
		chk("http", "http://allowed.example/"),
		chk("https", "allowed.example", "allowed.example"),
		chk("resolve", "other.example"),
		chk("http", "http://"+netB+"/"),                         // the allowed name's address, raw
		chk("https", netB, "allowed.example"),                   // the same, with the allowed SNI
		chk("http", "http://allowed.example/", "other.example"), // the allowed name's way, another Host
		chk("https", "allowed.example", "other.example"),        // the allowed name's way, another SNI
		chk("http", "http://"+netC+"/"),                         // an address of no allowed name
		chk("http", "http://allowed.example:8080/"),             // a port the policy does not name
		chk("resolve", "rebind.example"),                        // a public name pointing at metadata
		chk("tcp", testenv.MetadataIP, 80),
		chk("tcp", testenv.PrivateIP, 80),
		chk("tcp", netHost, 80),                   // the host's end of the test net
		chk("udpdns", netA, "allowed.example"),    // a resolver other than its own
		chk("resolve", "c2VjcmV0.tunnel.example"), // data out through its own resolver
	}
	want := []string{
		"ok internet " + netB + ":80 allowed.example", "ok internet " + netB + ":443 allowed.example", "fail",
		"fail", "fail", "fail", "fail", "fail", "fail",
		"fail", "fail", "fail", "fail", "fail", "fail",
	}
	expect(t, "allow allowed.example", checks, k.probe(t, named.Name, checks...), want)
	if q := in.Queries(); slices.ContainsFunc(q, func(s string) bool { return strings.Contains(s, "tunnel") || strings.Contains(s, "other.example") }) {
		t.Errorf("a name the policy does not allow reached the upstream resolver: %v", q)
	}

	// The policy's ports: a name is reached on them (and only them).
	ported := k.create(t, &netpolicy.Policy{Allow: []string{"www.allowed.example"}, Ports: []int{8080}})
	checks = [][]any{chk("http", "http://www.allowed.example:8080/"), chk("http", "http://www.allowed.example/")}
	expect(t, "allow www.allowed.example port 8080", checks, k.probe(t, ported.Name, checks...), []string{"ok internet " + netB + ":8080 www.allowed.example", "fail"})

	// "internet" without names: the resolver answers the addresses
	// themselves, which the NetworkPolicy reaches; still no other resolver.
	inet := k.create(t, &netpolicy.Policy{Allow: []string{"internet"}})
	checks = [][]any{
		chk("resolve", "raw.example"),
		chk("http", "http://raw.example/"),
		chk("resolve", "private.example"),
		chk("udpdns", netA, "raw.example"),
	}
	expect(t, "internet", checks, k.probe(t, inet.Name, checks...), []string{"ok " + netC, "ok internet " + netC + ":80 raw.example", "fail", "fail"})

	// No policy: the resolver refuses at once.
	none := k.create(t, nil)
	checks = [][]any{chk("resolve", "allowed.example"), chk("http", "http://"+netB+"/")}
	expect(t, "none", checks, k.probe(t, none.Name, checks...), []string{"fail", "fail"})

	// A live change: the other name now, the first one no more.
	if err := rt.SetNetwork(context.Background(), named.Name, mustRules(t, netpolicy.Policy{Allow: []string{"other.example"}})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "other.example reached after the change", func() bool {
		return strings.HasPrefix(k.probe(t, named.Name, chk("http", "http://other.example/"))[0], "ok internet")
	})
	checks = [][]any{chk("http", "http://allowed.example/"), chk("resolve", "allowed.example")}
	expect(t, "changed to other.example", checks, k.probe(t, named.Name, checks...), []string{"fail", "fail"})

	// What a NetworkPolicy cannot hold is refused, and nothing is made.
	for _, p := range []netpolicy.Policy{
		{Allow: []string{"internet"}, Deny: []string{"raw.example"}},
		{Allow: []string{"203.0.113.0/24"}, Deny: []string{"raw.example"}},
	} {
		err := rt.SetNetwork(context.Background(), inet.Name, mustRules(t, p))
		if sandbox.KindOf(err) != sandbox.KindUnsupported || !strings.Contains(err.Error(), "raw.example") {
			t.Errorf("%+v: %v, want refused as unsupported, naming the rule", p, err)
		}
	}
}

// podOf is the name of the egress gateway's pod in ns.
func podOf(t *testing.T, c kubernetes.Interface, ns string) string {
	l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + kube.GatewayName})
	if err != nil || len(l.Items) == 0 {
		return kube.GatewayName
	}
	return l.Items[0].Name
}
