package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/sandboxd/sandbox/client"
)

// The tenant's image verbs, through the API with the org's key: images,
// pull, snapshot and rmi. (`sandbox image ...` is the operator's: it
// works on the server's data directory, for every org or one.)

var imageHeader = []string{"NAME", "SCOPE", "SIZE", "DIGEST", "SOURCE", "CREATED"}

func imageRow(im client.Image) []string {
	ago := time.Since(im.Created()).Round(time.Second).String() + " ago"
	if im.Scope == client.ImageScopeClass {
		// What a class image holds is what its reader wants; a cluster's
		// server knows neither its size nor when it was built.
		size, digest := humanBytes(im.SizeBytes), "-"
		if im.SizeBytes == 0 {
			size, ago = "-", "-"
		}
		return []string{im.Name, im.Scope, size, digest, "--class " + im.Class + ": " + im.Holds, ago}
	}
	return []string{im.Name, im.Scope, humanBytes(im.SizeBytes), shortDigest(im.Digest), im.Source, ago}
}

func showImage(w io.Writer, output string, im *client.Image) error {
	return show(w, output, im, imageHeader, [][]string{imageRow(*im)})
}

// imagesCmd lists the images the org may start from: its own, the
// server's, then the class images.
func imagesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cf, _, err := verb("images", "", args, stderr, nil, 0, 0)
	if err != nil {
		return err
	}
	list, err := cf.c.Images(ctx)
	if err != nil {
		return err
	}
	rows := make([][]string, len(list))
	for i, im := range list {
		rows[i] = imageRow(im)
	}
	if list == nil {
		list = []client.Image{}
	}
	return show(stdout, cf.output, map[string]any{"images": list}, imageHeader, rows)
}

// pullCmd pulls an image into the org's images through the server, which
// must allow its registry; the registry password comes from one line of
// stdin, never the command line.
func pullCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var user string
	var passStdin bool
	cf, rest, err := verb("pull", "NAME REF [--username U --password-stdin]", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&user, "username", "", "registry username, for this pull only (with --password-stdin)")
		fs.BoolVar(&passStdin, "password-stdin", false, "read the registry password or token from one line of stdin")
	}, 2, 2)
	if err != nil {
		return err
	}
	auth, err := readAuth(user, passStdin, stdin)
	if err != nil {
		return err
	}
	req := client.PullRequest{Name: rest[0], Ref: rest[1]}
	if auth != nil {
		req.Username, req.Password = auth.Username, auth.Password
	}
	im, err := cf.c.PullImage(ctx, req)
	if err != nil {
		return err
	}
	return showImage(stdout, cf.output, im)
}

// snapshotCmd saves a sandbox's filesystem as an image of the org.
func snapshotCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var req client.SnapshotRequest
	cf, rest, err := verb("snapshot", "ID NAME [--workdir]", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&req.Workdir, "workdir", false, "save the workdir's files too (a lease of the image starts with them)")
	}, 2, 2)
	if err != nil {
		return err
	}
	req.Name = rest[1]
	im, err := cf.c.Snapshot(ctx, rest[0], req)
	if err != nil {
		return err
	}
	return showImage(stdout, cf.output, im)
}

// rmiCmd deletes one of the org's images (refused while a live sandbox
// runs it).
func rmiCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cf, rest, err := verb("rmi", "NAME", args, stderr, nil, 1, 1)
	if err != nil {
		return err
	}
	im, err := cf.c.DeleteImage(ctx, rest[0])
	if err != nil {
		return err
	}
	return showImage(stdout, cf.output, im)
}
