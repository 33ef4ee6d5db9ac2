package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
)

// Exchanger obtains a sandbox's credential by token exchange, as the
// "sandbox" client, for the caller's own token. end is the lease's end:
// the credential never outlives it.
type Exchanger interface {
	LeaseCredential(ctx context.Context, subjectToken, id string, end time.Time) (*Token, error)
}

// LeaseCredential exchanges in process, through the same Exchange as the
// token endpoint.
func (is *Issuer) LeaseCredential(ctx context.Context, subjectToken, id string, end time.Time) (*Token, error) {
	return is.Exchange(ctx, ExchangeRequest{
		GrantType: GrantTokenExchange, ClientID: ClientID, SubjectToken: subjectToken,
		SubjectTokenType: subjectType(subjectToken), Resource: Resource(id), ExpiresAt: end,
	}, true)
}

// subjectType names a subject token's type: a JWT, or an opaque access
// token (an API key).
func subjectType(token string) string {
	if IsJWT(token) {
		return TokenTypeJWT
	}
	return TokenTypeAccess
}

// RemoteExchanger exchanges at an external RFC 8693 token endpoint
// (--token-exchange-url), authenticated as the "sandbox" client.
type RemoteExchanger struct {
	URL      string
	Secret   string
	Audience string
	Client   *http.Client
}

// LeaseCredential posts the exchange and checks the answer: a bearer JWT
// that expires no later than end, and no refresh token.
func (x *RemoteExchanger) LeaseCredential(ctx context.Context, subjectToken, id string, end time.Time) (*Token, error) {
	if !IsJWT(subjectToken) {
		// An API key of this server means nothing there, and is no one
		// else's to see.
		return nil, errors.New("identity: the caller's credential is an API key of this server; only a JWT is sent to --token-exchange-url")
	}
	form := url.Values{
		"grant_type": {GrantTokenExchange}, "subject_token": {subjectToken}, "subject_token_type": {subjectType(subjectToken)},
		"requested_token_type": {TokenTypeJWT}, "resource": {Resource(id)}, "sandbox_expires_at": {strconv.FormatInt(end.Unix(), 10)},
	}
	if x.Audience != "" {
		form.Set("audience", x.Audience)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", x.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(ClientID), url.QueryEscape(x.Secret))
	c := x.Client
	if c == nil {
		c = http.DefaultClient
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("identity: token exchange: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("identity: token exchange: %w", err)
	}
	if res.StatusCode != 200 {
		var oe OAuthError
		if json.Unmarshal(body, &oe) == nil && oe.Code != "" {
			oe.status = res.StatusCode
			return nil, &oe
		}
		return nil, fmt.Errorf("identity: token exchange: %s", res.Status)
	}
	var answer struct {
		Token
		Refresh string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, fmt.Errorf("identity: token exchange answer: %w", err)
	}
	t := answer.Token
	if answer.Refresh != "" {
		return nil, errors.New("identity: the token endpoint handed a refresh token with the lease credential; refused")
	}
	if !strings.EqualFold(t.TokenType, "bearer") || t.AccessToken == "" {
		return nil, fmt.Errorf("identity: the token endpoint answered a %q token", t.TokenType)
	}
	// Its exp, read without verifying: this server only hands it on, and
	// refuses one that would outlive the lease.
	parsed, err := jwt.ParseSigned(t.AccessToken, asymmetric)
	if err != nil {
		return nil, fmt.Errorf("identity: the exchanged token is not a signed JWT: %w", err)
	}
	var claims jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil || claims.Expiry == nil {
		return nil, errors.New("identity: the exchanged token has no exp")
	}
	t.Expires = claims.Expiry.Time()
	if t.Expires.After(end) {
		return nil, fmt.Errorf("identity: the exchanged token expires at %s, after the lease (%s); refused", t.Expires.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	}
	return &t, nil
}
