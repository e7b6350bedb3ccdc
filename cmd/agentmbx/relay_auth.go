package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/agentmbx/agentmbx/relayserver"
	"github.com/agentmbx/agentmbx/relayserver/tokenauth"
)

// authFlags are relay serve's account-token flags (issue 11).
type authFlags struct {
	issuer, jwksURL, audience string
	required                  bool
	denyClients, denyHosts    []string
}

func (a *authFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.issuer, "auth-issuer", "", "admit hosts by account tokens of this issuer (its iss claim)")
	f.StringVar(&a.jwksURL, "auth-jwks-url", "", "the issuer's JWKS, fetched and cached to verify account tokens offline")
	f.StringVar(&a.audience, "auth-audience", "", "the aud account tokens must carry: this relay's URL")
	f.BoolVar(&a.required, "auth-required", false, "refuse hosts without an account token (default: they enrol by the host-key challenge, with no account)")
	f.StringSliceVar(&a.denyClients, "auth-deny-client", nil, "refuse account tokens of this client_id (repeatable)")
	f.StringSliceVar(&a.denyHosts, "auth-deny-host", nil, "refuse enrolments of this host key fingerprint (repeatable)")
}

// authority is the enrolment authority the flags ask for: nil (the relay's default, the host-key
// challenge) without --auth-issuer.
func (a *authFlags) authority(ctx context.Context, log *slog.Logger) (relayserver.EnrolmentAuthority, error) {
	set := a.issuer != "" || a.jwksURL != "" || a.audience != ""
	if !set {
		if a.required || len(a.denyClients) > 0 || len(a.denyHosts) > 0 {
			return nil, usageErr("pass --auth-issuer, --auth-jwks-url and --auth-audience", "relay serve: account-token flags without an issuer")
		}
		return nil, nil
	}
	if a.issuer == "" || a.jwksURL == "" || a.audience == "" {
		return nil, usageErr("pass all three", "relay serve: --auth-issuer, --auth-jwks-url and --auth-audience go together")
	}
	auth, err := tokenauth.New(ctx, tokenauth.Config{Issuer: a.issuer, JWKSURL: a.jwksURL, Audience: a.audience,
		Required: a.required, DenyClientIDs: a.denyClients, DenyHosts: a.denyHosts, Logger: log})
	if err != nil {
		return nil, usageErr("", "relay serve: %v", err)
	}
	return auth, nil
}
