package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// credentialMain writes stdin to /run/sandbox/token whole (a temporary
// file renamed), or removes the file when stdin is empty: the lease
// credential, over the exec channel, from one process (a shell doing the
// same starts five). Run as the sandbox's root, it gives the directory
// (0700) and the file (0600) to $SANDBOX_UID:$SANDBOX_GID; as the user,
// they are the user's already.
func credentialMain() int {
	const dir = "/run/sandbox"
	if err := credential(dir); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner credential:", err)
		return 1
	}
	return 0
}

func credential(dir string) error {
	token, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
	if err != nil {
		return err
	}
	uid, gid := -1, -1
	if os.Getuid() == 0 {
		if uid, err = strconv.Atoi(os.Getenv("SANDBOX_UID")); err != nil {
			return fmt.Errorf("SANDBOX_UID: %w", err)
		}
		if gid, err = strconv.Atoi(os.Getenv("SANDBOX_GID")); err != nil {
			return fmt.Errorf("SANDBOX_GID: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if uid >= 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, "token")
	if len(token) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	tmp, err := os.CreateTemp(dir, ".token-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(token); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if uid >= 0 {
		if err := os.Chown(tmp.Name(), uid, gid); err != nil {
			return err
		}
	}
	return os.Rename(tmp.Name(), path)
}
