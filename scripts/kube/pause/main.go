// Command pause is the pod sandbox ("infra") process of kube-up.sh's
// cluster: it sleeps until SIGINT/SIGTERM and reaps zombies meanwhile.
// kube-up.sh builds it statically and imports it as the image
// registry.k8s.io/pause:sandbox-local, which containerd pins as its sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range c {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
