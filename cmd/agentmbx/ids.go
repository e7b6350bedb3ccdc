package main

// Message ids as people type and read them: tables show the shortest prefix that tells the
// listed ids apart (at least shortIDMin characters), and every command that takes an id takes
// such a prefix (like git's short hashes), resolved by the host.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentmbx/agentmbx/api"
	"github.com/agentmbx/agentmbx/mbx"
)

// shortIDMin is the shortest id a table shows: the 10 characters of the id's millisecond and 2
// of its random part, so that a prefix shown is rarely shared by a message not listed.
const shortIDMin = 12

// fullID turns an id or an id prefix into the full id, through the host.
func fullID(ctx context.Context, c *conn, id string) (string, error) {
	if mbx.ValidULID(id) {
		return id, nil
	}
	r, ok := c.Service.(api.IDResolver)
	if !ok {
		return "", errors.New("this daemon takes only whole message ids; give all 26 characters")
	}
	return r.ResolveID(ctx, id)
}

// fullIDs resolves each of ids.
func fullIDs(ctx context.Context, c *conn, ids []string) ([]string, error) {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		f, err := fullID(ctx, c, id)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// shortIDs maps each of ids to its shortest prefix of at least shortIDMin characters that no
// other id in ids shares. Ids that are not message ids map to themselves.
func shortIDs(ids []string) map[string]string {
	out := make(map[string]string, len(ids))
	uniq := make([]string, 0, len(ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			uniq = append(uniq, id)
		}
	}
	for _, id := range uniq {
		if !mbx.ValidULID(id) {
			out[id] = id
			continue
		}
		n := shortIDMin
		for _, o := range uniq {
			if o != id {
				n = max(n, commonPrefix(id, o)+1)
			}
		}
		out[id] = id[:min(n, len(id))]
	}
	return out
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// ago is an ISO time as a table shows it: relative to now ("3m ago", "in 40s"), "-" for none;
// a time that does not parse is shown as it is.
func ago(iso string, now time.Time) string {
	if iso == "" {
		return ""
	}
	t, err := time.Parse(time.RFC3339Nano, iso)
	if err != nil {
		return iso
	}
	d := now.Sub(t)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d < 0:
		return "in " + span(-d)
	}
	return span(d) + " ago"
}

// span is a duration in its largest whole unit: 40s, 3m, 5h, 2d.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// plural is "1 agent", "2 agents".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
