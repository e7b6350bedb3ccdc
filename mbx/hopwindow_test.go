package mbx

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestHopWindowFarTimestamps: timestamps centuries away, where now.Sub saturates, are outside the
// window; its edges are inside.
func TestHopWindowFarTimestamps(t *testing.T) {
	now := time.UnixMilli(1773480413589)
	cases := []struct {
		ms   int64
		want bool
	}{
		{now.UnixMilli(), true},
		{now.Add(HopWindow).UnixMilli(), true},
		{now.Add(-HopWindow).UnixMilli(), true},
		{now.Add(HopWindow).UnixMilli() + 1, false},
		{now.Add(-HopWindow).UnixMilli() - 1, false},
		{math.MaxInt64, false},
		{math.MinInt64, false},
		{now.UnixMilli() + 400*365*24*3600*1000, false}, // four centuries ahead: Sub saturates
		{now.UnixMilli() - 400*365*24*3600*1000, false},
		{0, false},
	}
	for _, c := range cases {
		h := http.Header{}
		h.Set(HeaderTS, strconv.FormatInt(c.ms, 10))
		err := CheckRelayHopTime(h, now)
		if (err == nil) != c.want {
			t.Errorf("ts %d: err = %v, want in window %v", c.ms, err, c.want)
		}
		if err != nil && !errors.Is(err, ErrStaleHop) {
			t.Errorf("ts %d: err = %v, want ErrStaleHop", c.ms, err)
		}
	}
	for _, ts := range []string{"9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00.000Z", "2626-03-14T09:26:53.589Z"} {
		h := http.Header{}
		h.Set(HeaderTS, ts)
		if err := CheckLANHopTime(h, now); !errors.Is(err, ErrStaleHop) {
			t.Errorf("LAN ts %s: err = %v, want ErrStaleHop", ts, err)
		}
	}
}

// FuzzHopWindow: InHopWindow agrees with exact integer arithmetic on milliseconds for any
// timestamp and any clock, including the extremes of int64.
func FuzzHopWindow(f *testing.F) {
	f.Add(int64(1773480413589), int64(1773480413589))
	f.Add(int64(math.MaxInt64), int64(1773480413589))
	f.Add(int64(math.MinInt64), int64(1773480413589))
	f.Add(int64(1773480413589+300_000), int64(1773480413589))
	f.Add(int64(1773480413589+12_623_040_000_000), int64(1773480413589))
	f.Fuzz(func(t *testing.T, tsMS, nowMS int64) {
		// Clocks a verifier may run at: years 1970 to 2500.
		if nowMS < 0 || nowMS > 16_725_225_600_000 {
			return
		}
		w := HopWindow.Milliseconds()
		want := tsMS >= nowMS-w && tsMS <= nowMS+w // no overflow: nowMS is bounded above
		if got := InHopWindow(time.UnixMilli(tsMS), time.UnixMilli(nowMS)); got != want {
			t.Fatalf("InHopWindow(%d, %d) = %v, want %v", tsMS, nowMS, got, want)
		}
		h := http.Header{}
		h.Set(HeaderTS, strconv.FormatInt(tsMS, 10))
		if err := CheckRelayHopTime(h, time.UnixMilli(nowMS)); (err == nil) != want {
			t.Fatalf("CheckRelayHopTime(%d, %d) = %v, want ok %v", tsMS, nowMS, err, want)
		}
	})
}
