package kube

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestEnsureRacesAnotherServer: a server that starts beside another (the
// chart's replicas) finds the gateway's objects made or written between
// its read and its write; it reads again instead of failing its start.
func TestEnsureRacesAnotherServer(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		name string
		verb string
		err  error
		have bool // the object exists before
	}{
		{"written meanwhile", "update", apierrors.NewConflict(gr, "gw", nil), true},
		{"made meanwhile", "create", apierrors.NewAlreadyExists(gr, "gw"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []kruntime.Object
			if tc.have {
				objs = append(objs, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns", Labels: map[string]string{"v": "old"}}})
			}
			c := fake.NewClientset(objs...)
			failed := 0
			c.PrependReactor(tc.verb, "deployments", func(k8stesting.Action) (bool, kruntime.Object, error) {
				if failed < 2 {
					failed++
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			want := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "ns", Labels: map[string]string{"v": "new"}}}
			err := ensure(context.Background(), c.AppsV1().Deployments("ns"), want, func(cur *appsv1.Deployment) bool {
				cur.Labels = want.Labels
				return true
			})
			if err != nil {
				t.Fatalf("ensure after %d races: %v", failed, err)
			}
			got, err := c.AppsV1().Deployments("ns").Get(context.Background(), "gw", metav1.GetOptions{})
			if err != nil || got.Labels["v"] != "new" {
				t.Fatalf("the object after ensure: %v %v", got, err)
			}
		})
	}
}
