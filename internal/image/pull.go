package image

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Pulled images — from a registry or an archive, the tenant's toolchain
// instead of a class image — live under DIR/oci/HEX, HEX being the
// manifest digest's: rootfs/ and pulled.json, written last (a directory
// without it is half-pulled and never used). One digest is unpacked once,
// whatever names point at it.

const ociDir = "oci"

// Pulled is pulled.json: where an image came from and what its config
// asks of the sandbox that runs it.
type Pulled struct {
	Digest string `json:"digest"` // sha256:HEX of the manifest
	Source string `json:"source"` // the reference or file it came from
	// Pinned is the reference by digest a cluster pulls it by, for an
	// image recorded (Record) rather than unpacked.
	Pinned string `json:"pinned,omitempty"`
	// Seeded says the image carries a saved workdir (a snapshot's).
	Seeded bool `json:"seeded,omitempty"`
	// Access is how each org (by its slug) that pulled the image has the
	// cluster pull it: from its own reference, with its own
	// imagePullSecret for a private registry, never another org's (which
	// that org could revoke, or point elsewhere).
	Access map[string]Access `json:"access,omitempty"`
	// PullSecret is the one secret of a record written before Access,
	// for Pinned, used by an org with no Access of its own.
	PullSecret string    `json:"pullSecret,omitempty"`
	SizeBytes  int64     `json:"sizeBytes"`
	Files      int64     `json:"files"`
	Dropped    int64     `json:"dropped"` // devices and FIFOs not unpacked
	Layers     int       `json:"layers"`
	PulledAt   time.Time `json:"pulledAt"`
	Env        []string  `json:"env,omitempty"`
	WorkingDir string    `json:"workingDir,omitempty"`
	User       string    `json:"user,omitempty"`
	Entrypoint []string  `json:"entrypoint,omitempty"`
	Cmd        []string  `json:"cmd,omitempty"`
}

var digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Access is one org's way to a recorded image in a private registry.
type Access struct {
	Pinned string `json:"pinned"` // the reference by digest, in the registry the secret is for
	Secret string `json:"secret"` // the imagePullSecret
}

// recordMu serializes Record's read and write of a pulled.json.
var recordMu sync.Mutex

// AccessOf is how a pod of org (its slug) pulls the image: its own
// Access, else the record's Pinned with the secret of a record from
// before Access (none for a public image).
func (p *Pulled) AccessOf(org string) Access {
	if a, ok := p.Access[org]; ok {
		return a
	}
	return Access{Pinned: p.Pinned, Secret: p.PullSecret}
}

// IsDigest says whether s names a pulled image by digest.
func IsDigest(s string) bool { return digestPattern.MatchString(s) }

func pulledDir(dir, digest string) (string, error) {
	if !IsDigest(digest) {
		return "", fmt.Errorf("image: %q is not a sha256 digest", digest)
	}
	return filepath.Join(dir, ociDir, strings.TrimPrefix(digest, "sha256:")), nil
}

// InspectPulled reads the record of a complete pulled image.
func InspectPulled(dir, digest string) (*Pulled, error) {
	d, err := pulledDir(dir, digest)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d, "pulled.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, &notBuiltError{msg: fmt.Sprintf("image %s is not on this server (pull it again)", digest)}
	}
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var p Pulled
	if err := json.Unmarshal(b, &p); err != nil || p.Digest != digest {
		return nil, fmt.Errorf("image: the record of %s is damaged", digest)
	}
	return &p, nil
}

// PulledRootfs is the rootfs of a complete pulled image.
func PulledRootfs(dir, digest string) (string, error) {
	if _, err := InspectPulled(dir, digest); err != nil {
		return "", err
	}
	d, _ := pulledDir(dir, digest)
	return filepath.Join(d, rootfsDir), nil
}

// LayerError is a layer an unpack refused: an entry that would leave the
// rootfs, one over the limits (ErrTooLarge within), a broken tar.
type LayerError struct {
	Layer  int
	Source string
	Err    error
}

func (e *LayerError) Error() string {
	return fmt.Sprintf("image: layer %d of %s: %v", e.Layer, e.Source, e.Err)
}

func (e *LayerError) Unwrap() error { return e.Err }

// RegistryStatus is the HTTP status a registry refused with (401 for
// missing or wrong credentials, 404 for no such repository or tag), or 0
// when err is no registry's answer.
func RegistryStatus(err error) int {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return 0
}

// Auth is a registry's basic credentials.
type Auth struct{ Username, Password string }

// Remote reads the image ref (a tag or a digest) from its registry, for
// linux/amd64. A registry on loopback is spoken to over plain HTTP.
func Remote(ctx context.Context, ref string, auth *Auth) (v1.Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image: %q is not an image reference: %w", ref, err)
	}
	a := authn.Anonymous
	if auth != nil {
		a = authn.FromConfig(authn.AuthConfig{Username: auth.Username, Password: auth.Password})
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(a), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		return nil, fmt.Errorf("image: pulling %s: %w", ref, err)
	}
	return img, nil
}

// Push writes img to the registry as ref (anonymously: a registry the
// operator's cluster pulls from, on its own network).
func Push(ctx context.Context, img v1.Image, ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image: %q is not an image reference: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("image: pushing to %s: %w", ref, err)
	}
	return nil
}

// Append makes a new image of base (a reference its registry serves) with
// the layer tars on top — each checked, as a pull's, by ApplyLayer into a
// scratch directory within lim — pushes it to repo (the cluster pulls it
// from there) and records it. The second and later layers are a saved
// workdir (Seeded).
func Append(ctx context.Context, dir, base string, layers []string, repo, source string, lim Limits) (*Pulled, error) {
	scratch, err := os.MkdirTemp(filepath.Join(dir), ".check-")
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(scratch)
	cleaned, err := os.MkdirTemp(dir, ".check-clean-") // swept with the .check- ones
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(cleaned)
	root, err := os.OpenRoot(scratch)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer root.Close()
	var u Unpacked
	var ls []v1.Layer
	for i, l := range layers {
		// What is checked and pushed is the clean copy, not the tar as
		// the sandbox wrote it: the node unpacks exactly what passed.
		clean := filepath.Join(cleaned, fmt.Sprintf("layer-%d.tar", i))
		if err := cleanFile(clean, l, &u); err != nil {
			return nil, &LayerError{Layer: i + 1, Source: source, Err: err}
		}
		f, err := os.Open(clean)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		apply := ApplyLayer
		if i > 0 {
			apply = ApplySeedLayer // as Derive applies them
		}
		err = apply(root, f, lim, &u)
		f.Close()
		if err != nil {
			return nil, &LayerError{Layer: i + 1, Source: source, Err: err}
		}
		layer, err := tarball.LayerFromFile(clean)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		ls = append(ls, layer)
	}
	img, err := Remote(ctx, base, nil)
	if err != nil {
		return nil, err
	}
	if img, err = mutate.AppendLayers(img, ls...); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	ref := repo + ":snapshot-" + hex.EncodeToString(b)
	if err := Push(ctx, img, ref); err != nil {
		return nil, err
	}
	p, err := Record(ctx, dir, img, ref, "", "")
	if err != nil {
		return nil, err
	}
	if len(layers) > 1 && !p.Seeded {
		p.Seeded = true
		if err := writePulled(dir, p); err != nil {
			return nil, err
		}
	}
	p.Source, p.SizeBytes = source, u.Cost
	return p, nil
}

// cleanFile writes CleanLayer's copy of the layer file src to dst,
// counting what it left out into u.
func cleanFile(dst, src string, u *Unpacked) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	dropped, err := CleanLayer(out, in)
	u.Dropped += dropped
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// FromFile opens an image archive: an OCI layout (a directory, or a tar of
// one) or a `docker save` tarball. The returned func releases what was
// unpacked to read it.
func FromFile(path string) (v1.Image, func(), error) {
	none := func() {}
	st, err := os.Stat(path)
	if err != nil {
		return nil, none, fmt.Errorf("image: %w", err)
	}
	if st.IsDir() {
		img, err := fromLayout(path)
		return img, none, err
	}
	if isOCIArchive(path) {
		tmp, err := os.MkdirTemp("", "sandbox-oci-")
		if err != nil {
			return nil, none, err
		}
		done := func() { os.RemoveAll(tmp) }
		root, err := os.OpenRoot(tmp)
		if err == nil {
			var f *os.File
			if f, err = os.Open(path); err == nil {
				err = ApplyLayer(root, f, Limits{}, &Unpacked{})
				f.Close()
			}
			root.Close()
		}
		if err != nil {
			done()
			return nil, none, fmt.Errorf("image: reading the OCI archive: %w", err)
		}
		img, err := fromLayout(tmp)
		if err != nil {
			done()
			return nil, none, err
		}
		return img, done, nil
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, none, fmt.Errorf("image: %s is neither an OCI layout nor a docker save archive: %w", path, err)
	}
	return img, none, nil
}

func isOCIArchive(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for range 64 {
		h, err := tr.Next()
		if err != nil {
			return false
		}
		if strings.TrimPrefix(h.Name, "./") == "oci-layout" {
			return true
		}
	}
	return false
}

func fromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("image: %s is not an OCI layout: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && (d.Platform.OS != "linux" || d.Platform.Architecture != "amd64") {
			continue
		}
		if d.MediaType.IsIndex() {
			continue
		}
		return idx.Image(d.Digest)
	}
	return nil, fmt.Errorf("image: the OCI layout %s has no linux/amd64 image", dir)
}

// Progress is told after each layer: how many are done of how many, and
// the bytes unpacked so far.
type Progress func(done, layers int, bytes int64)

// Unpack makes img a pulled image under dir: its layers applied in order
// (ApplyLayer) to a staging directory that is renamed into place once
// complete, then its record. An image already there by digest costs
// nothing. lim bounds what it may unpack to.
func Unpack(ctx context.Context, dir string, img v1.Image, source string, lim Limits, progress Progress) (*Pulled, error) {
	dg, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	digest := dg.String()
	if p, err := InspectPulled(dir, digest); err == nil {
		return p, nil
	}
	final, err := pulledDir(dir, digest)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: its config: %w", err)
	}
	if cfg.OS != "" && cfg.OS != "linux" || cfg.Architecture != "" && cfg.Architecture != "amd64" {
		return nil, fmt.Errorf("image: %s is for %s/%s; this server runs linux/amd64", source, cfg.OS, cfg.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	base := filepath.Join(dir, ociDir)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	staging := filepath.Join(base, ".pull-"+hex.EncodeToString(b))
	if err := os.MkdirAll(filepath.Join(staging, rootfsDir), 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(staging)
	root, err := os.OpenRoot(filepath.Join(staging, rootfsDir))
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer root.Close()
	var u Unpacked
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, fmt.Errorf("image: layer %d: %w", i+1, err)
		}
		err = ApplyLayer(root, ctxReader{ctx, rc}, lim, &u)
		rc.Close()
		if err != nil {
			return nil, &LayerError{Layer: i + 1, Source: source, Err: err}
		}
		if progress != nil {
			progress(i+1, len(layers), u.Bytes)
		}
	}
	p := &Pulled{Digest: digest, Source: source, SizeBytes: u.Cost, Files: u.Entries, Dropped: u.Dropped, Layers: len(layers),
		PulledAt: time.Now().UTC(), Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
		Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd}
	raw, _ := json.MarshalIndent(p, "", "  ")
	if err := os.WriteFile(filepath.Join(staging, "pulled.json"), raw, 0o644); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	os.Chmod(staging, 0o755)
	if err := os.Rename(staging, final); err != nil {
		if q, ierr := InspectPulled(dir, digest); ierr == nil {
			return q, nil // a racing pull of the same digest finished first
		}
		return nil, fmt.Errorf("image: %w", err)
	}
	return p, nil
}

// Record notes img (read from ref) for a backend that runs images as
// they are in their registry — a cluster's nodes pull them — so nothing is
// unpacked: only pulled.json, with the reference pinned by digest. The
// size is the layers' as the registry stores them. An org's pull (org, its
// slug, not "") is recorded as its Access: ref's registry, with
// pullSecret if it is private; another org's stays as it is.
func Record(ctx context.Context, dir string, img v1.Image, ref, org, pullSecret string) (*Pulled, error) {
	dg, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	digest := dg.String()
	recordMu.Lock() // one write of a record at a time: each org's secret is kept
	defer recordMu.Unlock()
	old, err := InspectPulled(dir, digest)
	if err != nil {
		old = nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	pinned := r.Context().Digest(digest).String()
	if old != nil {
		if org == "" || old.Access[org] == (Access{Pinned: pinned, Secret: pullSecret}) {
			return old, nil
		}
		// Another org's pull of a digest recorded before: the record as
		// it is (what the others pull from, and with which secret; a
		// snapshot's Seeded), with this org's access added.
		p := *old
		p.Access = maps.Clone(old.Access)
		if p.Access == nil {
			p.Access = map[string]Access{}
		}
		p.Access[org] = Access{Pinned: pinned, Secret: pullSecret}
		return &p, writePulled(dir, &p)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: its config: %w", err)
	}
	if cfg.OS != "" && cfg.OS != "linux" || cfg.Architecture != "" && cfg.Architecture != "amd64" {
		return nil, fmt.Errorf("image: %s is for %s/%s; this server runs linux/amd64", ref, cfg.OS, cfg.Architecture)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var size int64
	for _, l := range m.Layers {
		size += l.Size
	}
	p := &Pulled{Digest: digest, Source: ref, Pinned: pinned, SizeBytes: size, Layers: len(m.Layers),
		PulledAt: time.Now().UTC(), Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
		Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd}
	if org != "" {
		p.Access = map[string]Access{org: {Pinned: pinned, Secret: pullSecret}}
	}
	if err := writePulled(dir, p); err != nil {
		return nil, err
	}
	return p, nil
}

// writePulled writes p as its image's pulled.json, whole (a temporary file
// renamed).
func writePulled(dir string, p *Pulled) error {
	d, err := pulledDir(dir, p.Digest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	raw, _ := json.MarshalIndent(p, "", "  ")
	tmp := filepath.Join(d, "pulled.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d, "pulled.json")); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// RemovePulled deletes a pulled image's files.
func RemovePulled(dir, digest string) error {
	d, err := pulledDir(dir, digest)
	if err != nil {
		return err
	}
	// The record goes first: from then on the image is half-there, never
	// used, and a crash in the middle leaves nothing that looks complete.
	os.Remove(filepath.Join(d, "pulled.json"))
	return os.RemoveAll(d)
}

// StagingGrace is how old a staging directory (a pull's, a snapshot's, a
// check's) must be before a sweep takes it for a crashed one's: a pull in
// flight — the server's or an operator's CLI — keeps writing into its own.
const StagingGrace = time.Hour

// SweepStaging removes what crashed pulls and snapshots left, older than
// StagingGrace.
func SweepStaging(dir string) {
	var stale []string
	for _, pat := range []string{filepath.Join(dir, ociDir, ".pull-*"), filepath.Join(dir, ".snapshot-*"), filepath.Join(dir, ".check-*")} {
		m, _ := filepath.Glob(pat)
		stale = append(stale, m...)
	}
	for _, s := range stale {
		if st, err := os.Lstat(s); err == nil && time.Since(st.ModTime()) > StagingGrace {
			os.RemoveAll(s)
		}
	}
}

// ctxReader stops a layer's read when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// classNeeds are the programs a class runs in its image, beyond /bin/sh
// which every class runs programs through.
var classNeeds = map[string][]string{
	"desktop": {"Xvfb", "x11vnc", "pgrep"},
	"android": {"emulator"},
}

// Missing lists what rootfs lacks of what class runs; empty means it can.
// Lookups stay inside the rootfs.
func Missing(rootfs, class string) []string {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return []string{"a root filesystem"}
	}
	defer root.Close()
	exe := func(p string) bool {
		st, err := root.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	var out []string
	if !exe("bin/sh") {
		out = append(out, "/bin/sh")
	}
	for _, prog := range classNeeds[class] {
		if !exe("usr/bin/"+prog) && !exe("bin/"+prog) && !exe("usr/local/bin/"+prog) {
			out = append(out, prog)
		}
	}
	return out
}

// Derive makes a new image from the rootfs base (a class image's or a
// pulled one's) and the layer tars, applied in order: what a snapshot of
// a sandbox is. Its digest is a hash of the base's name and the layers'
// bytes, so the same changes on the same base make one image. The copy of
// the base shares its files' storage (hardlinks): ApplyLayer replaces a
// file, never writes into one, and copies one up before a hard link's
// owner and mode are set, so the base is never changed. The second and
// later layers are a saved workdir (ApplySeedLayer). The image's cost
// (its SizeBytes, within lim) is its layers' and its copy of the base's
// (copyCost).
func Derive(ctx context.Context, dir, base, baseRootfs string, env []string, layers []string, source string, lim Limits) (*Pulled, error) {
	h := sha256.New()
	io.WriteString(h, "sandbox-derived\x00"+base+"\x00")
	for _, l := range layers {
		f, err := os.Open(l)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		h.Write([]byte{0})
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if p, err := InspectPulled(dir, digest); err == nil {
		return p, nil
	}
	final, _ := pulledDir(dir, digest)
	ociBase := filepath.Join(dir, ociDir)
	if err := os.MkdirAll(ociBase, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	staging := filepath.Join(ociBase, ".pull-"+hex.EncodeToString(b))
	if err := os.Mkdir(staging, 0o755); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(staging)
	rootfs := filepath.Join(staging, rootfsDir)
	// The copy is charged before it is made: a base of many entries
	// refuses a snapshot over the quota without taking the disk first.
	var u Unpacked
	cost, err := copyCost(ctx, baseRootfs, true)
	if err != nil {
		return nil, err
	}
	if err := u.charge(cost, lim, "the copy of the base"); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", "--link", baseRootfs, rootfs).CombinedOutput(); err != nil {
		os.RemoveAll(rootfs)
		// Another filesystem: a plain copy, charged as one.
		u.Cost = 0
		if cost, err = copyCost(ctx, baseRootfs, false); err != nil {
			return nil, err
		}
		if err := u.charge(cost, lim, "the copy of the base"); err != nil {
			return nil, err
		}
		if out2, err2 := exec.CommandContext(ctx, "cp", "-a", baseRootfs, rootfs).CombinedOutput(); err2 != nil {
			return nil, fmt.Errorf("image: copying the base: %v: %s %s", err2, out, out2)
		}
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer root.Close()
	for i, l := range layers {
		f, err := os.Open(l)
		if err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		apply := ApplyLayer
		if i > 0 {
			apply = ApplySeedLayer
		}
		err = apply(root, ctxReader{ctx, f}, lim, &u)
		f.Close()
		if err != nil {
			return nil, &LayerError{Layer: i + 1, Source: source, Err: err}
		}
	}
	p := &Pulled{Digest: digest, Source: source, SizeBytes: u.Cost, Files: u.Entries, Dropped: u.Dropped, Layers: len(layers),
		PulledAt: time.Now().UTC(), Env: env}
	raw, _ := json.MarshalIndent(p, "", "  ")
	if err := os.WriteFile(filepath.Join(staging, "pulled.json"), raw, 0o644); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := os.Rename(staging, final); err != nil {
		if q, ierr := InspectPulled(dir, digest); ierr == nil {
			return q, nil
		}
		return nil, fmt.Errorf("image: %w", err)
	}
	return p, nil
}

// copyCost is what a copy of the rootfs base takes on disk: EntryCost per
// directory (a new inode and its block, linked or not); per other entry
// LinkCost where linked (a name for the base's inode), else EntryCost and
// its bytes. It only reads the directories, but for a plain copy's sizes.
func copyCost(ctx context.Context, base string, linked bool) (int64, error) {
	var cost int64
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case d.IsDir():
			cost += EntryCost
		case linked:
			cost += LinkCost
		default:
			cost += EntryCost
			if d.Type().IsRegular() {
				st, err := d.Info()
				if err != nil {
					return err
				}
				cost += st.Size()
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("image: the base: %w", err)
	}
	return cost, nil
}

// ErrRootUser is wrapped by ConfigUser for an image that runs as root.
var ErrRootUser = errors.New("the image runs as root")

// ConfigUser resolves an image config's User ("1000", "1000:100", "app",
// "app:staff") against the image's own /etc/passwd and /etc/group (read
// inside the rootfs; "" when the backend has none to read). Empty asks for
// nothing (nil). Root, by name or number, is ErrRootUser.
func ConfigUser(rootfs, user string) (uid, gid int, set bool, err error) {
	if user == "" {
		return 0, 0, false, nil
	}
	name, group, _ := strings.Cut(user, ":")
	lookup := func(file, key string) (int, int, bool) {
		if rootfs == "" {
			return 0, 0, false
		}
		root, err := os.OpenRoot(rootfs)
		if err != nil {
			return 0, 0, false
		}
		defer root.Close()
		b, err := root.ReadFile(file)
		if err != nil || len(b) > 4<<20 {
			return 0, 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) >= 4 && f[0] == key {
				id, err1 := strconv.Atoi(f[2])
				gid, err2 := strconv.Atoi(f[3])
				if err1 == nil {
					if err2 != nil {
						gid = id
					}
					return id, gid, true
				}
			}
		}
		return 0, 0, false
	}
	num := func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 0 && n < 1<<31
	}
	if n, ok := num(name); ok {
		uid, gid = n, n
		if pu, pg, found := lookup("etc/passwd", name); found && pu == n {
			gid = pg
		}
	} else if pu, pg, found := lookup("etc/passwd", name); found {
		uid, gid = pu, pg
	} else if rootfs == "" {
		return 0, 0, false, fmt.Errorf("image: its user %q is a name, and this backend cannot read the image's /etc/passwd: it needs a number (User: \"1000\")", name)
	} else {
		return 0, 0, false, fmt.Errorf("image: user %q is not in the image's /etc/passwd", name)
	}
	if group != "" {
		if n, ok := num(group); ok {
			gid = n
		} else if g, _, found := lookup("etc/group", group); found {
			gid = g
		} else {
			return 0, 0, false, fmt.Errorf("image: group %q is not in the image's /etc/group", group)
		}
	}
	if uid == 0 {
		return 0, 0, false, ErrRootUser
	}
	return uid, gid, true, nil
}
