package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// maxProbeAnswer caps what a LAN probe reads of a peer's answer.
const maxProbeAnswer = 64 << 10

// checkPeers: each peer's enc key is known, and it answers over the LAN with an enc-key ad signed
// by its pinned key, or it is reached through the relay only.
func checkPeers(ctx context.Context, env Env, rs api.RelayStatus, r *Report) {
	peers, err := env.Host.Peers(ctx)
	if err != nil {
		r.add(Check{ID: "peers", Status: Fail, Summary: "peers unreadable: " + err.Error()})
		return
	}
	if len(peers) == 0 {
		r.add(Check{ID: "peers", Status: Info, Summary: "no peers yet: nothing can be sent to another host",
			Detail: "pair over the LAN (agentmbx pair here, agentmbx join on the other host), or pin a card from the other host (agentmbx peers add CARD)",
			Fix:    env.command("pair")})
		return
	}
	relayUp := rs.Configured && !rs.Stopped
	for _, p := range peers {
		c := checkPeer(ctx, env, p, relayUp)
		peerRotationDetail(&c, p)
		r.add(c)
	}
}

func checkPeer(ctx context.Context, env Env, p api.Peer, relayUp bool) Check {
	c := Check{ID: "peer." + p.Host}
	if !mbx.ValidPublicKey(p.EncPub) {
		c.Status, c.Summary = Fail, "its enc key is unknown: mail to it cannot be sealed"
		c.Detail = "unpin it, then pin it again from a fresh card (agentmbx peers add CARD)"
		c.Fix = env.command("peers", "remove", p.Host)
		return c
	}
	if p.Addr == "" {
		if relayUp {
			c.Status, c.Summary = OK, "relay-only (no LAN address); enc key known"
			return c
		}
		c.Status, c.Summary = Fail, "no LAN address and no relay in use: mail to it cannot leave"
		c.Detail = "set a relay both hosts use: agentmbx relay set URL --key FINGERPRINT"
		return c
	}
	err := probePeer(ctx, env, p)
	switch {
	case err == nil:
		c.Status, c.Summary = OK, "reachable over the LAN at "+p.Addr+" (signed answer verified); enc key known"
	case errors.Is(err, errImpostor):
		c.Status, c.Summary = Fail, "something else answers at "+p.Addr+": "+err.Error()
		c.Detail = "its answer is not signed by the pinned key " + p.Fingerprint + "\ncheck the address; if the host really got a new identity, unpin it (agentmbx peers remove " + p.Host + ") and pair again"
	case errors.Is(err, errEncChanged):
		c.Status, c.Summary = Warn, "reachable at "+p.Addr+", but it advertises another enc key than the pinned one"
		c.Detail = err.Error() + "\npin its current card: agentmbx peers add CARD"
	case relayUp:
		c.Status, c.Summary = Warn, "not reachable over the LAN at "+p.Addr+": mail goes through the relay"
		c.Detail = err.Error()
	default:
		c.Status, c.Summary = Warn, "not reachable over the LAN at "+p.Addr+" and no relay in use: mail waits for it"
		c.Detail = err.Error() + "\nstart its daemon, or set a relay both hosts use: agentmbx relay set URL --key FINGERPRINT"
	}
	return c
}

var (
	errImpostor   = errors.New("answer not signed by the pinned host key")
	errEncChanged = errors.New("enc key differs from the pinned one")
)

// probePeer asks the peer's LAN server for its enc-key ad and checks it is signed by the pinned
// host key for the pinned name, and names the pinned enc key.
func probePeer(ctx context.Context, env Env, p api.Peer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr+mbx.PathLANEncKey, nil)
	if err != nil {
		return err
	}
	resp, err := env.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: it answered %s", errImpostor, resp.Status)
	}
	var pub mbx.EncAdPublish
	if err := json.Unmarshal(body, &pub); err != nil {
		return fmt.Errorf("%w: not an enc-key ad", errImpostor)
	}
	ad, err := mbx.CheckEncAd(pub.Ad, pub.Sig, mbx.EncAdPeer{Host: p.Host, HostPubkey: p.HostPubkey}, env.Now())
	if err != nil {
		return fmt.Errorf("%w: %v", errImpostor, err)
	}
	if ad.EncPub != p.EncPub {
		return fmt.Errorf("%w: it advertises %s, pinned %s", errEncChanged, mbx.Fingerprint(ad.EncPub), mbx.Fingerprint(p.EncPub))
	}
	return nil
}

// checkLANAlerts: no peer's LAN address answers deliveries without the peer's signature (the
// host's LAN alerts, api.LANAlert). Each alert fails: mail to that peer waits (it is retried, and
// goes through the relay when one is set) until the peer's signed answer comes again.
func checkLANAlerts(env Env, st api.Status, r *Report) {
	for _, a := range st.LANAlerts {
		r.add(Check{ID: "peer." + a.Host + ".lan", Status: Fail,
			Summary: api.LANAlertSummary + ": " + a.Addr + " answers deliveries without the signature of " + a.Host + "'s pinned key " + a.Fingerprint,
			Detail: "since " + a.Since + ", last " + a.Last + ": " + a.Error + "\n" +
				"mail to " + a.Host + " is not taken as delivered: it stays pending and is retried (through the relay when one is set)\n" +
				"check which machine has that address now; if " + a.Host + " moved, pin its new card (agentmbx peers add CARD); the alert clears when its signed answer comes",
			Fix: env.command("outbox")})
	}
}
