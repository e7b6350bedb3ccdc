package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestBufferAndReaderUnderConcurrency: writers and readers of a Buffer, and readers of a Reader
// over a source that is not safe for concurrent use, race with nothing (-race) and lose nothing.
func TestBufferAndReaderUnderConcurrency(t *testing.T) {
	var b Buffer
	src := &counting{}
	r := NewReader(src)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4)
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
				_, _ = r.Read(p)
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("buffer holds %d bytes, want 800", len(got))
	}
	if src.n != 800 {
		t.Fatalf("source read %d times, want 800", src.n)
	}
}

// counting is a source with unguarded state: concurrent reads would race on n.
type counting struct{ n int }

func (c *counting) Read(p []byte) (int, error) {
	c.n++
	return len(p), nil
}
