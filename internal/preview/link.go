package preview

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Claims are what a preview link grants: port Port of sandbox ID of org
// Org, until Expires. The sandbox is looked up under Org on every request,
// so ending it revokes every link to it.
type Claims struct {
	Org     string
	ID      string
	Port    int
	Expires time.Time
	// Key is the public id of the API key that minted the link (key_…),
	// asked on every request so that revoking or expiring the key kills
	// the link with it. Empty for a principal that is not a key (an OIDC
	// token): its own expiry caps Expires instead.
	Key string
}

// Errors of Verify. Each is a refusal of the credential (401), never a
// statement about the sandbox.
var (
	ErrMalformed = errors.New("the preview link is malformed or was altered")
	ErrExpired   = errors.New("the preview link has expired")
	ErrElsewhere = errors.New("the preview link is for another sandbox or port")
)

// KeyFile is the name of the signing secret in the data directory.
const KeyFile = "preview.key"

// keySize is the secret's length: HMAC-SHA256's block half, 256 bits.
const keySize = 32

// maxToken bounds the token text Verify looks at (an org name is at most a
// few hundred bytes; nothing legitimate is near this).
const maxToken = 2048

// Signer mints and checks preview links with one secret.
type Signer struct {
	key []byte
}

// NewSigner is a Signer with key (at least 32 bytes).
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < keySize {
		return nil, fmt.Errorf("preview: a signing key has at least %d bytes", keySize)
	}
	return &Signer{key: append([]byte(nil), key...)}, nil
}

// LoadKey reads the signing secret from dir/KeyFile, making it (32 random
// bytes, mode 0600) on the first start. The secret never leaves the file:
// a server restart keeps every link it minted valid, and deleting the file
// (then restarting) revokes them all.
func LoadKey(dir string) (*Signer, error) {
	path := filepath.Join(dir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, keySize)
		rand.Read(key) // never fails on Linux
		f, cerr := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if cerr != nil {
			return nil, fmt.Errorf("preview: creating the signing key: %w", cerr)
		}
		_, werr := f.Write(key)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("preview: writing the signing key: %w", err)
		}
		return NewSigner(key)
	}
	if err != nil {
		return nil, fmt.Errorf("preview: reading the signing key: %w", err)
	}
	s, err := NewSigner(key)
	if err != nil {
		return nil, fmt.Errorf("preview: %s is not a signing key (delete it to make a new one, revoking every link): %w", path, err)
	}
	return s, nil
}

// tokenPrefix names the token's version, so a later format can be told
// from this one. spv2 added the minting key; an spv1 token (no key to
// check) is refused as malformed.
const tokenPrefix = "spv2."

// Mint is the token of c: "spv2." + base64url(payload) + "." +
// base64url(HMAC-SHA256(payload)). The payload is readable (it names the
// org, sandbox, port, expiry and the minting key's public id, which the
// holder may know anyway); only the MAC makes it a credential.
func (s *Signer) Mint(c Claims) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(encodeClaims(c)))
	return tokenPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

func (s *Signer) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("sandbox preview link\x00"))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func encodeClaims(c Claims) string {
	return strings.Join([]string{c.Org, c.ID, strconv.Itoa(c.Port), strconv.FormatInt(c.Expires.Unix(), 10), c.Key}, "\n")
}

// Parse checks token's MAC and expiry at now and returns its claims; it
// does not check which sandbox the request is for (Verify does).
func (s *Signer) Parse(token string, now time.Time) (Claims, error) {
	if len(token) > maxToken {
		return Claims{}, ErrMalformed
	}
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return Claims{}, ErrMalformed
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return Claims{}, ErrMalformed
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(payload)) {
		return Claims{}, ErrMalformed
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Claims{}, ErrMalformed
	}
	f := strings.Split(string(raw), "\n")
	if len(f) != 5 || f[0] == "" || f[1] == "" {
		return Claims{}, ErrMalformed
	}
	port, ok := ParsePort(f[2])
	exp, err := strconv.ParseInt(f[3], 10, 64)
	if !ok || err != nil {
		return Claims{}, ErrMalformed
	}
	c := Claims{Org: f[0], ID: f[1], Port: port, Expires: time.Unix(exp, 0), Key: f[4]}
	if !now.Before(c.Expires) {
		return Claims{}, ErrExpired
	}
	return c, nil
}

// Verify is Parse, and then requires the claims to be for sandbox id's
// port.
func (s *Signer) Verify(token, id string, port int, now time.Time) (Claims, error) {
	c, err := s.Parse(token, now)
	if err != nil {
		return Claims{}, err
	}
	if c.ID != id || c.Port != port {
		return Claims{}, ErrElsewhere
	}
	return c, nil
}
