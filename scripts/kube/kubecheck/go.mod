// This go.mod only keeps kubecheck out of the repository's main module: kube-up.sh
// copies main.go into its Kubernetes build module (ROOT/src/k8s/cmd/kubecheck),
// whose go.mod pins k8s.io/kubernetes and the staging modules, and builds it there.
module sandboxkube/kubecheck

go 1.26
