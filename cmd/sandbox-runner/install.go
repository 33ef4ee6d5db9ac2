package main

import (
	"fmt"
	"io"
	"os"
)

// installMain copies this executable to dest, read-only (mode 0555): what
// the init container of a Kubernetes sandbox pod runs, from the server's
// own image, to put the runner in a volume the sandbox's container mounts
// read-only — so the server never executes the runner from a path the
// tenant can write. usage: sandbox-runner install DEST
func installMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-runner install DEST")
		return 2
	}
	if err := install(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner install:", err)
		return 1
	}
	return 0
}

func install(dest string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, self); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(0o555); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
