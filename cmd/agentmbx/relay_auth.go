package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/tokenauth"
)

// authFlags are relay serve's account-token flags: the issuer whose tokens prove accounts.
type authFlags struct {
	issuer, jwksURL, audience string
	required, loopbackHTTP    bool
}

func (a *authFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.issuer, "auth-issuer", "", "admit hosts by account tokens of this issuer (its iss claim)")
	f.StringVar(&a.jwksURL, "auth-jwks-url", "", "the issuer's JWKS (https; redirects are not followed), fetched and cached to verify account tokens offline")
	f.BoolVar(&a.loopbackHTTP, "auth-jwks-loopback-http", false, "allow a plain http --auth-jwks-url to a loopback host (a local issuer or TLS proxy)")
	f.StringVar(&a.audience, "auth-audience", "", "the aud account tokens must carry: this relay's URL")
	f.BoolVar(&a.required, "auth-required", false, "refuse hosts without an account token (default: they enrol by the host-key challenge, with no account)")
}

// authority is the enrolment authority the flags ask for: nil (the relay's default, the host-key
// challenge) without --auth-issuer.
func (a *authFlags) authority(ctx context.Context, log *slog.Logger) (relayserver.EnrolmentAuthority, error) {
	set := a.issuer != "" || a.jwksURL != "" || a.audience != "" || a.loopbackHTTP
	if !set {
		if a.required {
			return nil, usageErr("pass --auth-issuer, --auth-jwks-url and --auth-audience", "relay serve: account-token flags without an issuer")
		}
		return nil, nil
	}
	if a.issuer == "" || a.jwksURL == "" || a.audience == "" {
		return nil, usageErr("pass all three", "relay serve: --auth-issuer, --auth-jwks-url and --auth-audience go together")
	}
	auth, err := tokenauth.New(ctx, tokenauth.Config{Issuer: a.issuer, JWKSURL: a.jwksURL, Audience: a.audience,
		Required: a.required, AllowLoopbackHTTP: a.loopbackHTTP, Logger: log})
	if err != nil {
		return nil, usageErr("", "relay serve: %v", err)
	}
	return auth, nil
}
