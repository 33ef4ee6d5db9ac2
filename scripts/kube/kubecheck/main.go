// Command kubecheck is kube-up.sh's kubectl-free client of the local cluster.
// kube-up.sh copies this file into the Kubernetes build module under
// ROOT/src/k8s and builds it into ROOT/bin/kubecheck.
//
//	kubecheck [-kubeconfig F] readyz [-timeout D]
//	kubecheck [-kubeconfig F] wait -node NAME [-since UNIXTIME] [-timeout D]
//	kubecheck [-kubeconfig F] runtimeclasses NAME=HANDLER...
//	kubecheck [-kubeconfig F] deletepods [-timeout D]
//	kubecheck [-kubeconfig F] smoke -image IMG [-runtime-class RC] [-uid N] [-namespace NS] [-check 'CMD=>WANT']...
//	kubecheck [-kubeconfig F] apply FILE...
//	kubecheck [-kubeconfig F] rollout [-timeout D] NAMESPACE/DEPLOYMENT...
//
// apply server-side applies every object of the YAML files (field manager
// kube-up, conflicts forced), as kubectl apply --server-side would; rollout
// waits until each Deployment has all its replicas updated and available.
//
// smoke creates a pod (imagePullPolicy Never, no service account token,
// command sleep 3600), waits for Running, runs each check through the
// apiserver's exec (sh -c CMD, stdout must equal WANT), then deletes the pod.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/rand"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ";") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	kc := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kubecheck [-kubeconfig F] readyz|wait|runtimeclasses|deletepods|smoke|apply|rollout [flags]")
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kc)
	must(err)
	cfg.UserAgent = "kubecheck"
	cs, err := kubernetes.NewForConfig(cfg)
	must(err)
	cmd, args := flag.Arg(0), flag.Args()[1:]
	switch cmd {
	case "readyz":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		timeout := fs.Duration("timeout", 2*time.Minute, "")
		must(fs.Parse(args))
		must(readyz(cs, *timeout))
	case "wait":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		node := fs.String("node", "", "node name")
		since := fs.Int64("since", 0, "the Ready condition must have been reported at or after this unix time (a kubelet just started)")
		timeout := fs.Duration("timeout", 3*time.Minute, "")
		must(fs.Parse(args))
		must(waitReady(cs, *node, time.Unix(*since, 0), *timeout))
	case "runtimeclasses":
		must(runtimeClasses(cs, args))
	case "deletepods":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		timeout := fs.Duration("timeout", 30*time.Second, "")
		must(fs.Parse(args))
		must(deletePods(cs, *timeout))
	case "smoke":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		o := smokeOpts{}
		fs.StringVar(&o.image, "image", "", "image (imagePullPolicy Never)")
		fs.StringVar(&o.rc, "runtime-class", "gvisor", "runtimeClassName (empty: the default handler)")
		fs.Int64Var(&o.uid, "uid", 1000, "securityContext runAsUser")
		fs.StringVar(&o.ns, "namespace", "default", "namespace")
		fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "")
		fs.Var(&o.checks, "check", "CMD=>WANT: exec sh -c CMD, stdout (trimmed) must be WANT (repeatable)")
		must(fs.Parse(args))
		if o.image == "" {
			must(errors.New("smoke: -image is required"))
		}
		must(smoke(cfg, cs, o))
	case "apply":
		must(apply(cfg, args))
	case "rollout":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		timeout := fs.Duration("timeout", 3*time.Minute, "")
		must(fs.Parse(args))
		must(rollout(cs, fs.Args(), *timeout))
	default:
		flag.Usage()
		os.Exit(2)
	}
}

// apply server-side applies each object in files.
func apply(cfg *rest.Config, files []string) error {
	if len(files) == 0 {
		return errors.New("apply: name at least one YAML file")
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := yamlutil.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", f, gvk.Kind, obj.GetName(), err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
			}
			body, err := json.Marshal(obj.Object)
			if err != nil {
				return err
			}
			if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: "kube-up", Force: ptr.To(true)}); err != nil {
				return fmt.Errorf("%s: apply %s %s: %w", f, gvk.Kind, obj.GetName(), err)
			}
		}
	}
	return nil
}

// rollout waits for each NAMESPACE/NAME Deployment to be fully rolled out.
func rollout(cs *kubernetes.Clientset, names []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, n := range names {
		ns, name, ok := strings.Cut(n, "/")
		if !ok {
			return fmt.Errorf("rollout: %q is not NAMESPACE/DEPLOYMENT", n)
		}
		err := poll(ctx, "deployment "+n+" rolled out", func() (bool, error) {
			d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			s := d.Status
			return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
				s.AvailableReplicas == want && s.Replicas == want, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubecheck: FAIL:", err)
		os.Exit(1)
	}
}

func poll(ctx context.Context, what string, f func() (bool, error)) error {
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: timed out (last error: %v)", what, last)
			}
			return fmt.Errorf("%s: timed out", what)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func readyz(cs *kubernetes.Clientset, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return poll(ctx, "apiserver /readyz", func() (bool, error) {
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(b)) == "ok", err
	})
}

func waitReady(cs *kubernetes.Clientset, node string, since time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := poll(ctx, "node "+node+" Ready", func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.LastHeartbeatTime.Time.Before(since) {
					return false, fmt.Errorf("Ready=%s reported at %v, before the kubelet started", c.Status, c.LastHeartbeatTime.Time)
				}
				if c.Status == corev1.ConditionTrue {
					return true, nil
				}
				return false, fmt.Errorf("Ready=%s: %s", c.Status, c.Message)
			}
		}
		return false, errors.New("no Ready condition yet")
	}); err != nil {
		return err
	}
	fmt.Printf("node %s Ready\n", node)
	if err := poll(ctx, "service account default/default", func() (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		return err
	}
	fmt.Println("service account default/default exists")
	return nil
}

// runtimeClasses makes each NAME=HANDLER RuntimeClass exist (the handler is
// immutable: a class with another handler is replaced).
func runtimeClasses(cs *kubernetes.Clientset, args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rcs := cs.NodeV1().RuntimeClasses()
	for _, a := range args {
		name, handler, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("runtimeclasses: %q is not NAME=HANDLER", a)
		}
		cur, err := rcs.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && cur.Handler == handler:
			fmt.Printf("runtimeclass %s (handler %s) exists\n", name, handler)
			continue
		case err == nil:
			if err := rcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
		case !apierrors.IsNotFound(err):
			return err
		}
		if _, err := rcs.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}, metav1.CreateOptions{}); err != nil {
			return err
		}
		fmt.Printf("runtimeclass %s (handler %s) created\n", name, handler)
	}
	return nil
}

// deletePods deletes every pod in every namespace (grace period 1 s) and
// waits until they are gone.
func deletePods(cs *kubernetes.Clientset, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return poll(ctx, "pods gone", func() (bool, error) {
		l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(l.Items) > 0 {
			return false, fmt.Errorf("%d pods left", len(l.Items))
		}
		fmt.Printf("deleted %d pods\n", len(pods.Items))
		return true, nil
	})
}

type smokeOpts struct {
	image, rc, ns string
	uid           int64
	timeout       time.Duration
	checks        multi
}

func smoke(cfg *rest.Config, cs *kubernetes.Clientset, o smokeOpts) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	name := "kubecheck-" + rand.String(6)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "kubecheck"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			RestartPolicy:                 corev1.RestartPolicyNever,
			SecurityContext:               &corev1.PodSecurityContext{RunAsUser: ptr.To(o.uid), RunAsGroup: ptr.To(o.uid)},
			Containers: []corev1.Container{{
				Name: "c", Image: o.image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
	if o.rc != "" {
		pod.Spec.RuntimeClassName = ptr.To(o.rc)
	}
	pods := cs.CoreV1().Pods(o.ns)
	t0 := time.Now()
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("pod %s/%s created (image %s, runtimeClass %q, runAsUser %d)\n", o.ns, name, o.image, o.rc, o.uid)
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
		defer dcancel()
		t := time.Now()
		if err := pods.Delete(dctx, name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(created.UID))}); err != nil {
			fmt.Fprintln(os.Stderr, "kubecheck: delete:", err)
			return
		}
		err := poll(dctx, "pod deletion", func() (bool, error) {
			_, err := pods.Get(dctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubecheck:", err)
			return
		}
		fmt.Printf("pod deleted and gone after %v\n", time.Since(t).Round(time.Millisecond))
	}()
	err = poll(ctx, "pod Running", func() (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod ended: %s %s", p.Status.Phase, p.Status.Message)
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
				return false, fmt.Errorf("waiting: %s: %s", w.Reason, w.Message)
			}
		}
		return false, fmt.Errorf("phase %s", p.Status.Phase)
	})
	if err != nil {
		evs, _ := cs.CoreV1().Events(o.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if evs != nil {
			for _, e := range evs.Items {
				fmt.Fprintf(os.Stderr, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
			}
		}
		return err
	}
	fmt.Printf("pod Running after %v\n", time.Since(t0).Round(time.Millisecond))
	for _, c := range o.checks {
		cmdline, want, ok := strings.Cut(c, "=>")
		if !ok {
			return fmt.Errorf("check %q is not CMD=>WANT", c)
		}
		t := time.Now()
		out, errOut, err := execIn(ctx, cfg, cs, o.ns, name, []string{"sh", "-c", cmdline})
		got := strings.TrimSpace(out)
		fmt.Printf("exec %q -> %q (stderr %q, err %v) in %v\n", cmdline, got, strings.TrimSpace(errOut), err, time.Since(t).Round(time.Millisecond))
		if err != nil {
			return fmt.Errorf("exec %q: %w", cmdline, err)
		}
		if got != strings.TrimSpace(want) {
			return fmt.Errorf("exec %q: got %q, want %q", cmdline, got, want)
		}
	}
	return nil
}

func execIn(ctx context.Context, cfg *rest.Config, cs *kubernetes.Clientset, ns, pod string, argv []string) (string, string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "c", Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", "", err
	}
	var out, errb bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
	return out.String(), errb.String(), err
}
