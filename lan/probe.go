package lan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentmbx/agentmbx/mbx"
	"github.com/agentmbx/agentmbx/outbox"
)

// ProbeTimeout bounds one probe request.
const ProbeTimeout = 10 * time.Second

// ErrNotThatPeer: the peer's LAN address answered as another host (another key).
var ErrNotThatPeer = errors.New("the LAN address answers as another host")

// Probe asks the peer's LAN address for its status (GET /v2/status, no hop: nothing is sent but
// the request) and returns nil when the host pinned as peer answers there. It reads at most
// maxLANAnswer bytes of the answer.
func (t *Transport) Probe(ctx context.Context, peer outbox.Peer) error {
	if peer.Addr == "" {
		return fmt.Errorf("no LAN address known for %s", peer.Host)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+peer.Addr+mbx.PathLANStatus, nil)
	if err != nil {
		return err
	}
	resp, err := t.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("peer answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	var st mbx.LANStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLANAnswer)).Decode(&st); err != nil {
		return fmt.Errorf("reading the status: %w", err)
	}
	if st.HostPubkey != peer.HostPubkey {
		return fmt.Errorf("%w (%s)", ErrNotThatPeer, mbx.Fingerprint(st.HostPubkey))
	}
	return nil
}
