//go:build race

package testkit

// RaceEnabled reports whether the binary was built with the race detector, whose shadow memory
// makes memory figures meaningless.
const RaceEnabled = true
