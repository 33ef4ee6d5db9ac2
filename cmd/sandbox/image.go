package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sandboxd/sandbox/internal/catalog"
	"github.com/sandboxd/sandbox/internal/image"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

const imageUsage = `usage:
  sandbox image build exec|dev|desktop|android [--images DIR]
        build a class image from Debian packages (idempotent)
  sandbox image pull NAME REF [--org ORG] [--username U --password-stdin] [--data DIR] [--images DIR]
        pull REF (registry/repo:tag or @sha256:...) for linux/amd64, unpack it
        once per digest under IMAGES/oci, and name it NAME: with --org for that
        org alone (it counts against the org's disk quota, which does not refuse
        it), else for every org. Prints the digest. The password is read from
        one line of stdin, used for this pull, and never stored.
  sandbox image import NAME FILE [--org ORG] [--data DIR] [--images DIR]
        the same from FILE: an OCI layout directory, a tar of one, or a
        'docker save' archive
        For a server on Kubernetes, --push REPO (with pull or import) pushes the
        image to REPO:NAME, a registry the cluster pulls from, and records it
        there by digest: the nodes pull it, nothing is unpacked here.
  sandbox image list [--org ORG] [--data DIR] [--images DIR]
        the class images, then the named ones: the server's, and with --org
        that org's
  sandbox image rm NAME [--org ORG] [--data DIR]
        drop a name (the server's, or with --org the org's; refused while a
        live sandbox of the org runs it). Its files stay until 'image gc'.
  sandbox image gc [--older-than DUR] [--data DIR] [--images DIR]
        delete the unpacked images no name and no sandbox refers to (with
        --older-than, only those pulled longer ago), and what crashed pulls
        left (staging directories older than an hour: a pull in flight keeps
        its own); prints what it freed.

--data defaults to /var/lib/sandbox and --images to DATA/images, as for
'sandbox serve'. A lease names an image with {"image": NAME}; an org's name
hides the server's of the same name.`

// imageCmd is `sandbox image`: the class images this tool builds, and the
// pulled or imported images the operator names for every org or one.
func imageCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, imageUsage)
		return errors.New("image takes build, pull, import, list, rm or gc")
	}
	verb := args[0]
	fs := flag.NewFlagSet("image "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, imageUsage) }
	if verb == "build" {
		dir := fs.String("images", filepath.Join(defaultData, "images"), "directory of built images")
		pos, err := parseInterleaved(fs, args[1:])
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return fmt.Errorf("usage: sandbox image build %s [--images DIR]", strings.Join(image.Names(), "|"))
		}
		return image.Build(ctx, *dir, pos[0], stderr)
	}
	data := fs.String("data", defaultData, "data directory of the server")
	images := fs.String("images", "", "images directory of the server (default DATA/images)")
	org := fs.String("org", "", "the org whose image it is (default: the server's, offered to every org)")
	var user, push *string
	var passStdin *bool
	var olderThan *time.Duration
	switch verb {
	case "pull":
		user = fs.String("username", "", "registry username, for this pull only (with --password-stdin)")
		passStdin = fs.Bool("password-stdin", false, "read the registry password or token from one line of stdin")
		push = fs.String("push", "", "for a server on Kubernetes: push the image to this repository (one the cluster pulls from) and record it there by digest instead of unpacking it here")
	case "import":
		push = fs.String("push", "", "for a server on Kubernetes: push the image to this repository (one the cluster pulls from) and record it there by digest instead of unpacking it here")
	case "gc":
		olderThan = fs.Duration("older-than", 0, "delete only images pulled longer ago than this (0: any)")
	case "list", "rm":
	default:
		fmt.Fprintln(stderr, imageUsage)
		return fmt.Errorf("unknown image command %q: use build, pull, import, list, rm or gc", verb)
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if want := map[string]int{"pull": 2, "import": 2, "list": 0, "rm": 1, "gc": 0}[verb]; len(pos) != want {
		fmt.Fprintln(stderr, imageUsage)
		return fmt.Errorf("image %s takes %d argument(s), not %d", verb, want, len(pos))
	}
	if verb == "gc" && *org != "" {
		return errors.New("image gc works on the whole server: drop --org")
	}
	if verb == "gc" && *olderThan < 0 {
		return errors.New("--older-than must not be negative")
	}
	if *images == "" {
		*images = filepath.Join(*data, "images")
	}
	if verb == "pull" || verb == "import" {
		if err := catalog.CheckImageName(pos[0]); err != nil {
			return errors.New(sandbox.Message(err))
		}
	}
	// Credentials come before the store opens, so that a mistake costs
	// nothing.
	var auth *image.Auth
	if verb == "pull" {
		if auth, err = readAuth(*user, *passStdin, stdin); err != nil {
			return err
		}
	}
	if verb == "list" {
		listClassImages(stdout, *images)
		if _, err := os.Stat(filepath.Join(*data, "control.db")); err != nil {
			return nil // no server's data here yet: no named images either
		}
	}
	return withStore(ctx, *data, func(st *store.Store) error {
		switch verb {
		case "pull", "import":
			return pullImage(ctx, st, *images, *org, pos[0], pos[1], verb == "import", auth, *push, stdout, stderr)
		case "list":
			return listImages(ctx, st, *images, *org, stdout)
		case "rm":
			return removeImage(ctx, st, *org, pos[0], stdout)
		default:
			return gcImages(ctx, st, *images, *olderThan, stdout)
		}
	})
}

// parseInterleaved parses fs's flags wherever they are among the
// positional arguments, which it returns in order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// readAuth is a pull's credentials: a username on the command line and
// its password on one line of stdin, never the command line (where ps
// and shell history would keep it).
func readAuth(user string, passStdin bool, stdin io.Reader) (*image.Auth, error) {
	switch {
	case user == "" && !passStdin:
		return nil, nil
	case user == "":
		return nil, errors.New("--password-stdin needs --username")
	case !passStdin:
		return nil, errors.New("--username needs --password-stdin: pipe the password in (printf '%s\\n' \"$TOKEN\" | sandbox image pull ...)")
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the password from stdin: %w", err)
	}
	pass := strings.TrimRight(line, "\r\n")
	if pass == "" {
		return nil, errors.New("--password-stdin read an empty password: pipe it in on one line")
	}
	return &image.Auth{Username: user, Password: pass}, nil
}

// pullImage unpacks src (a reference, or with fromFile an archive) and
// names it for the org, or for the server when org is empty.
func pullImage(ctx context.Context, st *store.Store, dir, org, name, src string, fromFile bool, auth *image.Auth, push string, stdout, stderr io.Writer) error {
	var img v1.Image
	source := src
	if fromFile {
		abs, err := filepath.Abs(src)
		if err != nil {
			return err
		}
		source = abs
		var done func()
		if img, done, err = image.FromFile(abs); err != nil {
			return fmt.Errorf("%w\n(import takes an OCI layout directory, a tar of one, or a 'docker save' archive)", err)
		}
		defer done()
		fmt.Fprintf(stderr, "importing %s\n", abs)
	} else {
		var err error
		if img, err = image.Remote(ctx, src, auth); err != nil {
			return registryError(src, auth, err)
		}
		fmt.Fprintf(stderr, "pulling %s\n", src)
	}
	progress := func(done, layers int, bytes int64) {
		fmt.Fprintf(stderr, "layer %d/%d  %s\n", done, layers, humanBytes(bytes))
	}
	if dg, err := img.Digest(); err == nil {
		if _, err := image.InspectPulled(dir, dg.String()); err == nil {
			fmt.Fprintf(stderr, "%s is unpacked already\n", shortDigest(dg.String()))
		}
	}
	var p *image.Pulled
	var err error
	if push != "" {
		// The cluster's nodes pull it from push; nothing is unpacked here.
		ref := strings.TrimSuffix(push, "/") + ":" + name
		fmt.Fprintf(stderr, "pushing to %s\n", ref)
		if err := image.Push(ctx, img, ref); err != nil {
			return err
		}
		p, err = image.Record(ctx, dir, img, ref, "", "")
	} else {
		p, err = image.Unpack(ctx, dir, img, source, image.Limits{}, progress)
	}
	if err != nil {
		if !fromFile {
			return registryError(src, auth, err)
		}
		return err
	}
	im := store.Image{Name: name, Digest: p.Digest, Source: source, SizeBytes: p.SizeBytes, CreatedAt: time.Now()}
	if org == "" {
		im.Server = true
		err = st.PutServerImage(ctx, im)
	} else {
		err = st.PutImage(orgContext(ctx, org), im)
	}
	if err != nil {
		return err
	}
	scope := "every org's"
	if org != "" {
		scope = "org " + org + "'s"
	}
	fmt.Fprintf(stderr, "%s is %s image %s (%s in %d files)\n", name, scope, shortDigest(p.Digest), humanBytes(p.SizeBytes), p.Files)
	fmt.Fprintln(stdout, p.Digest)
	return nil
}

// registryError says what to do about a registry's refusal.
func registryError(ref string, auth *image.Auth, err error) error {
	if code := image.RegistryStatus(err); code != 0 {
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden:
			if auth == nil {
				return fmt.Errorf("the registry wants credentials for %s: give --username U --password-stdin", ref)
			}
			return fmt.Errorf("the registry refused the credentials of %s for %s: check the username and the password or token", auth.Username, ref)
		case http.StatusNotFound:
			return fmt.Errorf("the registry has no %s: check the repository and tag", ref)
		}
	}
	return err
}

func orgContext(ctx context.Context, org string) context.Context {
	return sandbox.WithPrincipal(ctx, sandbox.Principal{Org: org, Subject: "cli"})
}

func listClassImages(stdout io.Writer, dir string) {
	for _, n := range image.Names() {
		m, err := image.Inspect(dir, n)
		if err != nil {
			fmt.Fprintf(stdout, "%-8s not built\n", n)
			continue
		}
		fmt.Fprintf(stdout, "%-8s built %s\n", n, m.BuiltAt.Format("2006-01-02 15:04"))
	}
}

// listImages prints the named images: the org's with --org, and the
// server's.
func listImages(ctx context.Context, st *store.Store, dir, org string, stdout io.Writer) error {
	if org != "" {
		ctx = orgContext(ctx, org)
	}
	list, err := st.Images(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return nil
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPE\tDIGEST\tSIZE\tSOURCE\tCREATED")
	for _, im := range list {
		scope := "server"
		if !im.Server {
			scope = "org " + org
		}
		digest := shortDigest(im.Digest)
		if _, err := image.InspectPulled(dir, im.Digest); err != nil {
			digest += " (files gone: pull it again)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", im.Name, scope, digest, humanBytes(im.SizeBytes), im.Source, im.CreatedAt.UTC().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

func removeImage(ctx context.Context, st *store.Store, org, name string, stdout io.Writer) error {
	server := org == ""
	if !server {
		ctx = orgContext(ctx, org)
	}
	im, err := st.DeleteImage(ctx, name, server)
	if errors.Is(err, sandbox.ErrNotFound) {
		if server {
			return fmt.Errorf("the server has no image %q ('sandbox image list' shows them; an org's needs --org)", name)
		}
		return fmt.Errorf("org %s has no image %q ('sandbox image list --org %s' shows them)", org, name, org)
	}
	if err != nil {
		if sandbox.KindOf(err) != sandbox.KindInternal {
			return errors.New(sandbox.Message(err)) // "in use by sb_…: end it first"
		}
		return err
	}
	fmt.Fprintf(stdout, "removed %s (%s); 'sandbox image gc' frees its files once nothing refers to it\n", im.Name, shortDigest(im.Digest))
	return nil
}

// gcImages deletes the unpacked images nothing refers to.
func gcImages(ctx context.Context, st *store.Store, dir string, olderThan time.Duration, stdout io.Writer) error {
	keep, err := st.ImageDigests(ctx)
	if err != nil {
		return err
	}
	image.SweepStaging(dir)
	ents, err := os.ReadDir(filepath.Join(dir, "oci"))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stdout, "no pulled images")
		return nil
	}
	if err != nil {
		return err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	cutoff := time.Now().Add(-olderThan)
	var freed int64
	var removed int
	var errs []error
	for _, e := range ents {
		digest := "sha256:" + e.Name()
		if !e.IsDir() || !image.IsDigest(digest) {
			continue
		}
		p, perr := image.InspectPulled(dir, digest)
		// A directory without its record is half-pulled or half-removed,
		// never used: it goes whatever refers to it.
		if perr == nil && (keep[digest] || olderThan > 0 && p.PulledAt.After(cutoff)) {
			continue
		}
		size, what := int64(0), "incomplete"
		if perr == nil {
			size, what = p.SizeBytes, p.Source
		} else {
			size = dirSize(filepath.Join(dir, "oci", e.Name()))
		}
		if err := image.RemovePulled(dir, digest); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", shortDigest(digest), err))
			continue
		}
		freed += size
		removed++
		fmt.Fprintf(stdout, "removed %s  %s  %s\n", shortDigest(digest), humanBytes(size), what)
	}
	fmt.Fprintf(stdout, "freed %s in %d image(s)\n", humanBytes(freed), removed)
	return errors.Join(errs...)
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// shortDigest is the first 12 hex digits of a digest, as docker shows it.
func shortDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// humanBytes is n in decimal units: 38.1 MB.
func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
