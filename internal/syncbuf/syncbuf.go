// Package syncbuf has a bytes.Buffer that several goroutines may write (a logger, a child
// process's output) while another reads what was written (the demo's children and the tests,
// through testkit.SyncBuffer, share it), and a Reader that serializes the reads of a source not
// safe for concurrent use (the host's injected randomness).
package syncbuf

import (
	"bytes"
	"io"
	"sync"
)

// Buffer is safe for concurrent use. The zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Reader serializes the reads of a source that need not be safe for concurrent use (an injected
// randomness source).
type Reader struct {
	mu sync.Mutex
	r  io.Reader
}

// NewReader returns r with its reads serialized.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

func (l *Reader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}
