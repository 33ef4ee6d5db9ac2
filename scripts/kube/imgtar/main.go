// Command imgtar turns a directory rootfs into a single-layer docker-archive
// tarball that `ctr images import` reads (kube-image.sh pipes it into the
// cluster's containerd).
//
//	imgtar -ref sandbox/exec:local [-cmd /bin/sh] [-label k=v]... [-tmp DIR] [-o OUT|-] ROOTFS
//
// The layer keeps what the directory holds: numeric uid/gid (no user-name
// mapping), modes with setuid/setgid/sticky bits, mtimes (whole seconds),
// symlinks, hardlinks (the first path is the file, later ones are links),
// device nodes, FIFOs and extended attributes (security.capability and the
// like). Sockets cannot be stored in a tar and are skipped with a warning.
//
// The layer is streamed to a temporary file and hashed while it is written,
// so memory stays small whatever the size of the rootfs; the archive is then
// streamed to OUT (stdout by default) and the temporary file removed.
package main

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "imgtar:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		ref, out, tmpDir, workdir, user string
		cmd, labels, envs               multiFlag
	)
	flag.StringVar(&ref, "ref", "", "image reference written as the archive's RepoTag (required), e.g. sandbox/exec:local")
	flag.StringVar(&out, "o", "-", "output archive (- for stdout)")
	flag.StringVar(&tmpDir, "tmp", os.TempDir(), "directory for the temporary layer file (needs the rootfs' size free)")
	flag.StringVar(&workdir, "workdir", "", "image config WorkingDir")
	flag.StringVar(&user, "user", "", "image config User")
	flag.Var(&cmd, "cmd", "image config Cmd, one flag per argument (default /bin/sh)")
	flag.Var(&labels, "label", "image config label KEY=VALUE (repeatable)")
	flag.Var(&envs, "env", "image config Env KEY=VALUE (repeatable; PATH has a default)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s -ref NAME:TAG [flags] ROOTFS_DIR\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if ref == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	rootfs := flag.Arg(0)
	if st, err := os.Stat(rootfs); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", rootfs)
	}
	if len(cmd) == 0 {
		cmd = multiFlag{"/bin/sh"}
	}
	lab := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("bad -label %q (want KEY=VALUE)", l)
		}
		lab[k] = v
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range envs {
		if strings.HasPrefix(e, "PATH=") {
			env[0] = e
		} else {
			env = append(env, e)
		}
	}

	// A write to a closed pipe (the importer failed) must come back as an
	// error so the temporary file is removed, not kill the process.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	t0 := time.Now()
	tmp, err := os.CreateTemp(tmpDir, "imgtar-*.layer")
	if err != nil {
		return err
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()

	h := sha256.New()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	st, err := writeLayer(ctx, io.MultiWriter(bw, h), rootfs)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	layerSize, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	diffID := hex.EncodeToString(h.Sum(nil))
	fmt.Fprintf(os.Stderr, "imgtar: layer sha256:%s, %d bytes, %d entries (%d hardlinks, %d skipped) in %.1fs\n",
		diffID, layerSize, st.entries, st.hardlinks, st.skipped, time.Since(t0).Seconds())

	created := "1970-01-01T00:00:00Z"
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      created,
		"config": map[string]any{
			"Cmd":        []string(cmd),
			"Env":        env,
			"Labels":     lab,
			"WorkingDir": workdir,
			"User":       user,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + diffID}},
		"history": []map[string]string{{"created": created, "created_by": "imgtar " + rootfs}},
	})
	if err != nil {
		return err
	}
	cs := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cs[:]) + ".json"
	layerName := diffID + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{layerName},
	}})
	if err != nil {
		return err
	}

	var w io.Writer = os.Stdout
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	obw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(obw)
	add := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := add(layerName, layerSize, &ctxReader{ctx, tmp}); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := add(cfgName, int64(len(cfg)), strings.NewReader(string(cfg))); err != nil {
		return err
	}
	if err := add("manifest.json", int64(len(manifest)), strings.NewReader(string(manifest))); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := obw.Flush(); err != nil {
		return err
	}
	if out != "-" {
		if err := w.(*os.File).Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "imgtar: %s config sha256:%s written in %.1fs\n", ref, cfgName[:64], time.Since(t0).Seconds())
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type stats struct{ entries, hardlinks, skipped int }

type inode struct{ dev, ino uint64 }

// writeLayer writes rootfs as a tar stream to w, in lexical path order.
func writeLayer(ctx context.Context, w io.Writer, rootfs string) (stats, error) {
	var st stats
	tw := tar.NewWriter(w)
	seen := map[inode]string{} // hardlinked files: first path written
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(rootfs, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			fmt.Fprintf(os.Stderr, "imgtar: skipping socket %s\n", rel)
			st.skipped++
			return nil
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		sys, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat_t", rel)
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		// Numeric ids only: the host's user names mean nothing in the image.
		hdr.Uid, hdr.Gid = int(sys.Uid), int(sys.Gid)
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime = fi.ModTime().Truncate(time.Second)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.Format = tar.FormatUnknown // the writer picks USTAR, or PAX when needed
		if hdr.Typeflag == tar.TypeReg && sys.Nlink > 1 {
			k := inode{uint64(sys.Dev), uint64(sys.Ino)}
			if first, ok := seen[k]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				st.hardlinks++
			} else {
				seen[k] = rel
			}
		}
		if hdr.Typeflag != tar.TypeSymlink {
			if x, err := xattrs(p); err != nil {
				return fmt.Errorf("%s: xattrs: %w", rel, err)
			} else if len(x) > 0 {
				hdr.PAXRecords = map[string]string{}
				for k, v := range x {
					hdr.PAXRecords["SCHILY.xattr."+k] = v
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		st.entries++
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("%s: changed while read (%d of %d bytes)", rel, n, hdr.Size)
			}
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, tw.Close()
}

// xattrs returns the extended attributes of p (not following symlinks is not
// needed: symlinks are skipped by the caller), without security.selinux.
func xattrs(p string) (map[string]string, error) {
	sz, err := syscall.Listxattr(p, nil)
	if err != nil {
		if errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return nil, nil
		}
		return nil, err
	}
	if sz == 0 {
		return nil, nil
	}
	lb := make([]byte, sz)
	sz, err = syscall.Listxattr(p, lb)
	if err != nil {
		return nil, err
	}
	names := strings.Split(strings.TrimRight(string(lb[:sz]), "\x00"), "\x00")
	sort.Strings(names)
	out := map[string]string{}
	for _, n := range names {
		if n == "" || n == "security.selinux" {
			continue
		}
		vsz, err := syscall.Getxattr(p, n, nil)
		if err != nil {
			if errors.Is(err, syscall.ENODATA) {
				continue
			}
			return nil, err
		}
		v := make([]byte, vsz)
		if vsz > 0 {
			if vsz, err = syscall.Getxattr(p, n, v); err != nil {
				return nil, err
			}
		}
		out[n] = string(v[:vsz])
	}
	return out, nil
}
