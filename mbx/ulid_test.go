package mbx

import (
	"bytes"
	"crypto/rand"
	"regexp"
	"testing"
	"time"
)

func TestULIDVectors(t *testing.T) {
	type tc struct {
		Name        string `json:"name"`
		NowMS       int64  `json:"now_ms"`
		Prefix      string `json:"prefix"`
		ExampleFull string `json:"example_full"`
		FullRegex   string `json:"full_regex"`
		First       string `json:"first"`
		Second      string `json:"second"`
		NextMSFirst string `json:"next_ms_first"`
	}
	for _, c := range loadCases[tc](t, "ulid.json") {
		t.Run(c.Name, func(t *testing.T) {
			u := NewULIDs(rand.Reader)
			if c.First != "" {
				// Seed the generator with the example's random part to replay the monotonic rule.
				u2 := NewULIDs(bytes.NewReader(randomPartBytes(t, c.First[10:])))
				now := time.UnixMilli(c.NowMS)
				if got := u2.New(now); got != c.First {
					t.Fatalf("first %s, want %s", got, c.First)
				}
				if got := u2.New(now); got != c.Second {
					t.Errorf("second %s, want %s", got, c.Second)
				}
				if got := u.New(now.Add(time.Millisecond)); got[:10] != c.NextMSFirst[:10] {
					t.Errorf("next ms prefix %s, want %s", got[:10], c.NextMSFirst[:10])
				}
				return
			}
			got := u.New(time.UnixMilli(c.NowMS))
			if got[:10] != c.Prefix {
				t.Errorf("prefix %s, want %s", got[:10], c.Prefix)
			}
			if !regexp.MustCompile(c.FullRegex).MatchString(got) || !ValidULID(got) || !ValidULID(c.ExampleFull) {
				t.Errorf("%s does not match %s", got, c.FullRegex)
			}
		})
	}
}

// randomPartBytes maps 16 Crockford characters back to bytes whose value mod 32 is each digit.
func randomPartBytes(t *testing.T, s string) []byte {
	t.Helper()
	out := make([]byte, len(s))
	for i := range s {
		d := bytes.IndexByte([]byte(crockford), s[i])
		if d < 0 {
			t.Fatalf("bad character %q", s[i])
		}
		out[i] = byte(d)
	}
	return out
}

func TestULIDMonotonic(t *testing.T) {
	u := NewULIDs(rand.Reader)
	now := time.UnixMilli(1773480425934)
	prev := u.New(now)
	for range 1000 {
		next := u.New(now)
		if next <= prev {
			t.Fatalf("not monotonic: %s then %s", prev, next)
		}
		prev = next
	}
}
