package api

import (
	"context"
	"time"
)

// The quarantine's actions on the control socket, served when the service also implements
// QuarantineService:
//
//	POST /v1/relay/quarantine/release  QuarantineReleaseRequest  → QuarantineRelease
//	POST /v1/relay/quarantine/purge    QuarantinePurgeRequest    → QuarantinePurge

// QuarantineService acts on the relay items a host refused (RelayService.RelayQuarantine lists
// them). The host's relay link implements it on the store; client.Client over the socket.
type QuarantineService interface {
	// ReleaseQuarantined processes one quarantined item again (its ID, or a unique prefix of it),
	// as when it was pulled, once its cause is fixed (its sender paired, say): accepted, it leaves
	// the quarantine; refused again, it stays with the new reason. Nothing is lost either way.
	ReleaseQuarantined(ctx context.Context, req QuarantineReleaseRequest) (QuarantineRelease, error)
	// PurgeQuarantined deletes the quarantined items first held longer ago than OlderThan.
	PurgeQuarantined(ctx context.Context, req QuarantinePurgeRequest) (QuarantinePurge, error)
}

// QuarantineReleaseRequest names the item to process again.
type QuarantineReleaseRequest struct {
	ID string `json:"id"`
}

// QuarantineRelease says what processing the item again did.
type QuarantineRelease struct {
	Item QuarantineItem `json:"item"`
	// Accepted is true when the item was taken this time (it left the quarantine); false when it
	// was refused again (it stays; Item has the new cause and reason).
	Accepted bool `json:"accepted"`
}

// QuarantinePurgeRequest deletes items quarantined more than OlderThan ago (at least a minute).
type QuarantinePurgeRequest struct {
	OlderThan time.Duration `json:"older_than_ns"`
}

// QuarantinePurge lists the items a purge deleted.
type QuarantinePurge struct {
	Purged []QuarantineItem `json:"purged"`
}
