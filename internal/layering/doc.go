// Package layering has no code: its test reads the package table in docs/architecture.md and
// checks every import of the module against it (each package imports only what its row names),
// and that no two top-level folders import each other, so a wrong-way import fails the tests
// instead of creeping in.
package layering
