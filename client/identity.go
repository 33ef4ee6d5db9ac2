package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// CredentialPath is where the server writes a sandbox's own credential,
// inside it.
const CredentialPath = "/run/sandbox/token"

// InSandbox is a client for code running in a sandbox: the server at base,
// with the sandbox's own credential read from CredentialPath. It may read
// its own lease, renew it and narrate (Narrate); nothing else.
func InSandbox(base string) (*Client, error) {
	b, err := os.ReadFile(CredentialPath)
	if err != nil {
		return nil, fmt.Errorf("client: this sandbox has no credential: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, errors.New("client: this sandbox has no credential: " + CredentialPath + " is empty")
	}
	return New(base, tok), nil
}

// Narrate appends a note to session's log in the org (an event of kind
// "note"); its followers see it at once.
func (c *Client) Narrate(ctx context.Context, session, text string) error {
	return c.do(ctx, request{method: "POST", path: "/v1/sessions/" + esc(session) + "/events", in: map[string]string{"text": text}})
}
