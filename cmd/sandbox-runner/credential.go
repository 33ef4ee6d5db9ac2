package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
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
	token, err := io.ReadAll(io.LimitReader(os.Stdin, maxCredential))
	if err != nil {
		return err
	}
	return writeCredential(dir, token)
}

// maxCredential bounds what is read as a credential.
const maxCredential = 64 << 10

// writeCredential writes token to dir/token whole, or removes the file
// when token is empty; as root for $SANDBOX_UID:$SANDBOX_GID (credential),
// or as the user in a directory that is the user's already (the relay's
// 'w' stream: /run/sandbox is the user's own memory mount from the start).
func writeCredential(dir string, token []byte) error {
	var err error
	uid, gid := -1, -1
	if os.Getuid() == 0 {
		if uid, err = strconv.Atoi(os.Getenv("SANDBOX_UID")); err != nil {
			return fmt.Errorf("SANDBOX_UID: %w", err)
		}
		if gid, err = strconv.Atoi(os.Getenv("SANDBOX_GID")); err != nil {
			return fmt.Errorf("SANDBOX_GID: %w", err)
		}
	}
	if uid >= 0 {
		if err := ownDir(dir, uid, gid); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
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
	// By the descriptor, never the name: the directory is the sandbox
	// user's, who could swap the name for a link to a file of root's
	// between two calls of ours.
	if uid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return err
		}
	}
	if _, err := tmp.Write(token); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ownDir makes dir (under a parent that only root may write, so the name
// cannot be swapped under us) and gives it to uid:gid through its
// descriptor, opened without following a link: a link planted where dir
// goes is removed, never followed.
func ownDir(dir string, uid, gid int) error {
	parent := filepath.Dir(dir)
	st, err := os.Lstat(parent)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || sys.Uid != 0 || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a directory only root may write", parent)
	}
	if st, err := os.Lstat(dir); err == nil && !st.IsDir() {
		if err := os.Remove(dir); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return syscall.Fchmod(fd, 0o700)
}
