package main

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// changesMain is `sandbox-runner changes STAMP SKIP...`: a tar on stdout
// of what changed in this container's root filesystem since STAMP was
// made — every entry on the root's filesystem whose ctime is later (a
// created or written file has a new ctime; no program can set it back),
// its parents first — leaving out the SKIP trees (/proc, the workdir...).
// It is how a snapshot reads a pod, whose overlay's upper layer is the
// node's and not the API's. What was deleted is not seen.
func changesMain(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-runner changes STAMP [SKIP...]")
		return 2
	}
	var stamp syscall.Stat_t
	if err := syscall.Stat(args[0], &stamp); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner changes: no start stamp (the pod predates snapshots):", err)
		return 3
	}
	skip := map[string]bool{}
	for _, s := range args[1:] {
		skip[filepath.Clean(s)] = true
	}
	// Every mount but the root is another filesystem (/proc, the
	// workdir, the files the kubelet binds in): not the image's. Device
	// numbers cannot say it: an overlay gives its new files another one.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[4] != "/" {
				skip[filepath.Clean(unescapeMount(f[4]))] = true
			}
		}
	}
	bw := bufio.NewWriterSize(os.Stdout, 256<<10)
	tw := tar.NewWriter(bw)
	written := map[string]bool{}
	var add func(p string, st *syscall.Stat_t) error
	add = func(p string, st *syscall.Stat_t) error {
		if written[p] || p == "/" {
			return nil
		}
		if parent := filepath.Dir(p); parent != "/" && !written[parent] {
			var pst syscall.Stat_t
			if err := syscall.Lstat(parent, &pst); err == nil {
				if err := add(parent, &pst); err != nil {
					return err
				}
			}
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil // gone meanwhile
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // a socket or a device: not part of an image
		}
		h.Name = strings.TrimPrefix(p, "/")
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		written[p] = true
		if !fi.Mode().IsRegular() {
			return tw.WriteHeader(h)
		}
		f, err := os.Open(p)
		if err != nil {
			return nil // not the sandbox user's to read: not its change
		}
		defer f.Close()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, h.Size)
		return err
	}
	err := filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if skip[p] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		if after(st.Ctim, stamp.Ctim) {
			return add(p, &st)
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner changes:", err)
		return 1
	}
	return 0
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var n int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &n); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
