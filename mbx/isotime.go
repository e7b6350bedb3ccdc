package mbx

import (
	"fmt"
	"time"
)

// isoLayout is JavaScript's Date.prototype.toISOString form.
const isoLayout = "2006-01-02T15:04:05.000Z"

// ISOTime prints t in UTC with millisecond precision, as toISOString does.
func ISOTime(t time.Time) string { return t.UTC().Truncate(time.Millisecond).Format(isoLayout) }

// ParseISOTime reads an ISO-8601 time the way Date.parse reads the ISO forms: with or without
// fractional seconds, seconds, and with "Z" or a numeric offset; a bare date is midnight UTC. A
// date-time without a zone is refused (Date.parse would read it as local time).
func ParseISOTime(s string) (time.Time, error) {
	for _, layout := range []string{
		time.RFC3339Nano,
		"2006-01-02T15:04Z07:00",
		"2006-01-02",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("not an ISO-8601 time: %q", s)
}
