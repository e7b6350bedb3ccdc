package host

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/host/mailstore"
	"github.com/agentmbx/agentmbx/mbx"
)

// ResolveID turns a message id prefix into the full id of the one message this host holds (in
// any mailbox) or sent that begins with it (api.IDResolver). A full id is returned as it is. The
// prefix is read in any case (ids are upper-case Crockford base32).
func (h *Host) ResolveID(ctx context.Context, idPrefix string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	p := strings.ToUpper(idPrefix)
	if mbx.ValidULID(p) {
		return p, nil
	}
	if len(p) < api.MinIDPrefix || len(p) > 26 || strings.Trim(p, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") != "" {
		return "", fmt.Errorf("message id %q: %w: give at least %d of its characters (ids are 26 characters of 0-9 and A-Z but I, L, O, U)",
			idPrefix, api.ErrInvalid, api.MinIDPrefix)
	}
	var ids []string
	err := h.db.View(func(tx *bbolt.Tx) error {
		ids = append(mailstore.MessageIDsTx(tx, p, 3), keysWithPrefix(tx.Bucket(bucketSent), p, 3)...)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("host: resolve id: %w", err)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no message id begins with %s: %w", idPrefix, api.ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("message id %s is ambiguous: %w: it begins %s (give more characters)",
		idPrefix, api.ErrConflict, strings.Join(ids, ", "))
}

// keysWithPrefix returns up to max keys of b that begin with p, in order.
func keysWithPrefix(b *bbolt.Bucket, p string, max int) []string {
	var out []string
	c := b.Cursor()
	for k, _ := c.Seek([]byte(p)); k != nil && len(out) < max && strings.HasPrefix(string(k), p); k, _ = c.Next() {
		out = append(out, string(k))
	}
	return out
}
