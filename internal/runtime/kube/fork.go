package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// Fork starts spec's pod with a copy of ref's workdir at this instant:
// files, not memory (a pod's memory cannot be copied; the Object says
// MemoryKept false). A project fork's new claim is made empty by Create;
// a scratch fork's emptyDir likewise. The files stream from a tar in the
// original's pod to a tar in the fork's, over the exec subresource — the
// one way into a pod — so nothing of the node is touched and no volume
// must be mountable twice. A fork that cannot be filled is deleted.
func (r *Runtime) Fork(ctx context.Context, ref runtime.Ref, spec runtime.Spec) (runtime.Object, error) {
	src, err := r.cfg.Client.CoreV1().Pods(r.ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return runtime.Object{}, runtime.ErrNotFound
	}
	if err != nil {
		return runtime.Object{}, fmt.Errorf("kube: reading pod %s: %w", ref.Name, err)
	}
	if string(src.UID) != ref.UID {
		return runtime.Object{}, runtime.ErrConflict
	}
	from := ""
	for _, c := range src.Spec.Containers {
		if c.Name == container {
			from = c.WorkingDir
		}
	}
	if from == "" {
		return runtime.Object{}, fmt.Errorf("kube: pod %s has no working directory to fork", ref.Name)
	}
	obj, err := r.Create(ctx, spec)
	if err != nil {
		return runtime.Object{}, err
	}
	if err := r.copyWorkdir(ctx, ref.Name, from, spec.Name, spec.Workdir); err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := r.Delete(dctx, runtime.Ref{Name: obj.Name, UID: obj.UID}); derr != nil && !errors.Is(derr, runtime.ErrNotFound) {
			err = fmt.Errorf("%w (and removing the fork's pod: %v)", err, derr)
		}
		return runtime.Object{}, err
	}
	return obj, nil
}

// copyWorkdir pipes `tar -c` of dir in pod from into `tar -x` in dir of
// pod to. Both run as the sandbox's user, in the sandboxes' own images
// The workdir is archived by its name from its parent and extracted one
// component down: the workdir itself is the volume's root, whose mode and
// times are not the user's to set, and its own entry is then skipped.
func (r *Runtime) copyWorkdir(ctx context.Context, from, dir, to, toDir string) error {
	pr, pw := io.Pipe()
	var outErr, inErr bytes.Buffer
	read := make(chan error, 1)
	go func() {
		err := r.stream(ctx, from, []string{"tar", "-C", path.Dir(dir), "-cf", "-", path.Base(dir)}, false, nil, pw, &outErr, nil)
		pw.CloseWithError(err)
		read <- err
	}()
	err := r.stream(ctx, to, []string{"tar", "-C", toDir, "--strip-components=1", "-xf", "-"}, false, pr, io.Discard, &inErr, nil)
	pr.CloseWithError(errors.New("the fork's tar ended"))
	rerr := <-read
	switch {
	case rerr != nil:
		return fmt.Errorf("kube: fork: reading the files of %s: %w: %s", from, rerr, strings.TrimSpace(outErr.String()))
	case err != nil:
		return fmt.Errorf("kube: fork: writing the files into %s: %w: %s", to, err, strings.TrimSpace(inErr.String()))
	}
	return nil
}
