package host

import (
	"context"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/card"
	"github.com/agentmbx/agentmbx/mbx"
)

// Host cards (package host/card).
const (
	// CardType is the type field of a host card.
	CardType = card.Type
	// CardSkew is how far a card's time may be ahead of the reader's clock.
	CardSkew = card.Skew
	// MaxCardBytes caps the size of a card ParseCard reads.
	MaxCardBytes = card.MaxBytes
)

// Card returns this host's signed host card: its name, host key, enc key, the LAN address addr
// when not empty (host:port, as the peer should dial it) and the time, signed by the host key.
// The JSON is indented for people and ends with a newline.
func (h *Host) Card(_ context.Context, addr string) ([]byte, error) {
	if addr != "" {
		if err := mbx.CheckDialAddr(addr); err != nil {
			return nil, fmt.Errorf("host: card: %w: %v", api.ErrInvalid, err)
		}
	}
	return card.Make(h.name, h.key, h.enc.PublicKey(), addr, h.clock())
}

// ParseCard reads a host card (card.Parse) and returns the peer it describes (AddedAt is left
// zero). Its errors match card.ErrMalformed, card.ErrSignature and card.ErrFuture.
func ParseCard(data []byte, now time.Time) (PeerRecord, error) {
	c, err := card.Parse(data, now)
	if err != nil {
		return PeerRecord{}, err
	}
	return PeerRecord{Host: c.Host, HostPubkey: c.HostPubkey, EncPub: c.EncPub, Addr: c.Addr}, nil
}
